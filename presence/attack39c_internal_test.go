package presence

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestAttackForgedClaimHidesARouter (session 39, red team c): the rule that
// one process holds one place kept the first key seen with an instance for
// good. A writer of P_routers (a buggy router, anything with the router
// login) puts once, under a key of its own naming itself, a live router's
// instance. A router started within the bucket's TTL of that put loads the
// forged key first (it is older in the stream than a's latest renewal),
// gives it a's process, and refused a's every renewal after: a was never
// kept, judged gone a lease after anything it ended, for as long as the
// watching router ran (the sweep forgets stale keys only in a full table).
// A claim now lasts while its key is renewed: a stale or deleted holder
// gives the instance up to the key that renews it: a is kept a lease after
// the forged put, and what it ended before is judged gone (publishes the
// events stream de-duplicates). Left: a writer that
// renews the forged key too holds it against a new router's table, as any
// writer of the bucket can renew a router's key under a wrong instance.
func TestAttackForgedClaimHidesARouter(t *testing.T) {
	const hb = time.Second
	synctest.Test(t, func(t *testing.T) {
		p := New(nil, Config{ID: "me", Heartbeat: hb})
		p.apply(put("z", "a1")) // the forged key, put once, delivered first
		p.apply(put("a", "a1"))
		p.apply(mine(p))
		beat := func(n int) {
			for range n {
				time.Sleep(hb)
				p.apply(put("a", "a1"))
				p.apply(mine(p))
			}
		}
		beat(Beats + 2) // the forged key goes stale, a is kept
		time.Sleep(time.Millisecond)
		t1 := time.Now() // a ends something
		beat(Beats + 1)
		if got := p.Judge("a", t1); got != Outlived {
			t.Fatalf("a live router behind a forged claim on its process: %v, want outlived", got)
		}
		if p.owner["a1"] != "a" {
			t.Fatalf("owners %v", p.owner)
		}
	})
}
