package security

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/router"
)

// TestOwnAgentOutsideSharedPool (protocol 1.13, docs/security.md): s2 has
// an agent login of its own (session-s2) bound to no user. Through 1.12 its
// batches counted with the shared agent's in the pool of three quarters of
// the slots that the sessions without a user hold together, so either
// could shut the other out: s2, holding its share of long calls, filled
// the pool and the shared agent's batches were answered busy; the shared
// agent, holding the pool over many sessions, had s2's batch answered busy.
// A login of its own is an identity of its own: s2 holds at most its own
// share, outside the pool, and neither shuts the other out. The session's
// share is set to the pool's size (12 of 16), the most it can hold.
func TestOwnAgentOutsideSharedPool(t *testing.T) {
	const slots, share = 16, 12
	pool := slots - slots/4
	for _, tc := range []struct {
		name             string
		flooder, other   string // logins
		floodIn, otherIn func(i int) string
		holding          int // of the flooder's batches at once
	}{
		{"own agent floods", "session-s2", "agent",
			func(int) string { return "s2" }, func(int) string { return "x1" }, share},
		{"shared agent floods", "agent", "session-s2",
			func(i int) string { return fmt.Sprintf("x%d", i) }, func(int) string { return "s2" }, pool},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDeployment(t, func(c *router.Config) { c.MaxInflight, c.MaxSessionInflight = slots, share })
			gate := make(chan struct{})
			defer close(gate) // before the worker's drain, a cleanup
			var running atomic.Int32
			gatedWorker(t, d, gate, &running, bus.ToolDef{Name: "hold", Description: "Holds.", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 120_000},
				bus.ToolDef{Name: "quick", Description: "Answers.", ReadOnly: true})
			flooder := d.conn(tc.flooder).client()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			for i := range 2 * slots { // more than it may hold: the client retries the ones answered busy
				go func() {
					_, _ = flooder.Call(ctx, tc.floodIn(i), bus.Batch{Calls: []bus.Call{{ID: "c", Name: "hold"}}})
				}()
			}
			poll, pcancel := context.WithTimeout(t.Context(), bound)
			defer pcancel()
			for int(running.Load()) < tc.holding {
				if bus.Sleep(poll, 20*time.Millisecond) != nil {
					t.Fatalf("after %s, %d of %s's batches run; want %d", bound, running.Load(), tc.flooder, tc.holding)
				}
			}
			octx, ocancel := context.WithTimeout(t.Context(), bound)
			defer ocancel()
			r, err := d.conn(tc.other).client().Call(octx, tc.otherIn(0), bus.Batch{Calls: []bus.Call{{ID: "q", Name: "quick"}}})
			if err != nil || r.Results[0].State != bus.StateSuccess {
				t.Fatalf("%s's batch while %s holds %d slots: %v %+v", tc.other, tc.flooder, tc.holding, err, r)
			}
			if n := running.Load(); int(n) != tc.holding {
				t.Fatalf("%d of %s's batches run at once, want %d", n, tc.flooder, tc.holding)
			}
		})
	}
}
