package registry

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestAttack42bRateKeysChurn (held): an attacker with more NATS accounts
// than the table remembers (maxRateKeys) registers from a new one each time.
// A victim's allowance is never lowered by it (a forgotten account starts
// full again), and the sweeps stay rare: each forgets every account spent
// by less than half, so a sweep that forgets few needs ~4,096 accounts each
// spending more than half its burst, refilled at the rate within seconds.
func TestAttack42bRateKeysChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRate(1 << 20)
		if !r.Take("victim", 4<<20) {
			t.Fatal("the victim's first registrations refused")
		}
		scans := 0
		for i := range 20 * maxRateKeys {
			if len(r.keys) >= maxRateKeys {
				scans++ // this Take sweeps: the new key finds the table full
			}
			r.Take(fmt.Sprint("attacker-", i), 64<<10)
			if i%1000 == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if scans > 2*20 { // one a table's worth of new accounts; twice that at most
			t.Errorf("%d sweeps of %d keys for %d new accounts: a sweep forgets too few", scans, maxRateKeys, 20*maxRateKeys)
		}
		// The victim, forgotten or kept, has at least what it had left.
		if !r.Take("victim", 4<<20) {
			t.Error("the victim's allowance was lowered by another account's churn")
		}
		t.Logf("%d sweeps for %d new accounts", scans, 20*maxRateKeys)
	})
}
