package presence

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestAttack38bGoneKeysForgetNoLiveRouter (session 38, second red team:
// held): a writer of P_routers (a router-role login) fills the table
// again and again with keys judged gone, deleted ones and ones left
// unrenewed past a lease, so that each new key sweeps it, while a live
// router renews. The sweep forgets only routers judged gone at the
// watch's last read: the live one is kept as it was (its instance first
// seen before what it ended), and outlives what it ended.
func TestAttack38bGoneKeysForgetNoLiveRouter(t *testing.T) {
	const hb = time.Second
	synctest.Test(t, func(t *testing.T) {
		p := New(nil, Config{ID: "me", Heartbeat: hb})
		p.apply(mine(p))
		p.apply(put("live", "l1"))
		time.Sleep(time.Millisecond)
		t0 := time.Now() // live ends something
		n := 0
		for beat := range 3 {
			for range MaxRouters { // a fill, half deleted, half left to go stale
				id := fmt.Sprint("fill", n)
				p.apply(put(id, id)) // a process each (one would hold one place)
				if n++; n%2 == 0 {
					p.apply(entry{key: id, op: jetstream.KeyValueDelete})
				}
			}
			time.Sleep(hb)
			p.apply(put("live", "l1"))
			p.apply(mine(p))
			p.mu.Lock()
			pr, ok := p.peers["live"]
			size := len(p.peers)
			p.mu.Unlock()
			if !ok || pr.instance != "l1" || pr.since.After(t0) || size > MaxRouters {
				t.Fatalf("beat %d: the live router %+v (kept %v) among %d", beat, pr, ok, size)
			}
		}
		if got := p.Judge("live", t0); got != Outlived {
			t.Fatalf("the live router after %d keys judged gone: %v, want outlived", n, got)
		}
	})
}
