package presence

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestAttackRestartsFillPresence (session 38, red team): a router's id is
// new at each start (a NUID unless configured), and a router kept every id
// it ever saw. A peer in a crash loop (or restarted by whoever may restart
// it) 4,096 times filled MaxRouters with routers long gone, so a live router
// started afterwards was never kept: judged gone a lease after anything it
// ended, its lone batches' events were published again by every survivor
// and its stranded results mended, for as long as the survivors ran. Routers
// judged gone (deleted, or stale at the watch's last read) now make room.
func TestAttackRestartsFillPresence(t *testing.T) {
	const hb = time.Second
	synctest.Test(t, func(t *testing.T) {
		p := New(nil, Config{ID: "me", Heartbeat: hb})
		p.apply(mine(p)) // its own key, put at start
		for i := range MaxRouters {
			id := fmt.Sprintf("crash%d", i)
			p.apply(put(id, id)) // a process each
			if i%2 == 0 {
				p.apply(entry{key: id, op: jetstream.KeyValueDelete}) // a clean stop
			} // else it died: its key ages out, unrenewed
		}
		time.Sleep(4 * hb) // past a lease: every one of them is gone
		p.apply(mine(p))
		if got := p.Judge("crash1", time.Now().Add(-5*hb)); got != Gone {
			t.Fatalf("a crashed router: %v", got)
		}
		p.apply(put("fresh", "f1"))
		time.Sleep(time.Millisecond)
		t0 := time.Now() // fresh ends something
		for range 4 {
			time.Sleep(hb)
			p.apply(put("fresh", "f1"))
			p.apply(mine(p))
		}
		if got := p.Judge("fresh", t0); got != Outlived {
			t.Fatalf("a live router started after %d restarts: %v, want outlived", MaxRouters, got)
		}
		if n := len(p.peers); n > MaxRouters {
			t.Fatalf("%d routers kept", n)
		}
	})
}
