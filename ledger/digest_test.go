package ledger

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// A duplicate whose call digest differs from the claim's (another tool or
// input under the key, docs/protocol.md 3.1, 1.12) gets bad_request for its
// call, never the claim's result, whether that claim runs, is recorded, or
// is recorded but not landed on this router; one with the same digest, or
// without one (a router of 1.11), gets the result as before.
func TestDuplicateOfAnotherCall(t *testing.T) {
	ls := newTestLedger(t, "a", "b")
	call := func(input string) Call {
		c := bus.Call{ID: "c1", Name: "write", Input: json.RawMessage(input)}
		return Call{Key: "s.r.c1", Call: c, Digest: bus.CallDigest(c.Name, c.Input), Timeout: time.Minute}
	}
	mine, theirs := call(`{"v":1}`), call(`{"v":2}`)
	started, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ls[0].Once(t.Context(), mine, func() bus.Result {
			close(started)
			<-release
			return bus.Result{ID: "c1", Name: "write", State: bus.StateSuccess, Output: bus.Text("v1")}
		})
	})
	<-started
	check := func(when string, l *Ledger, c Call, wantOther bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		got := l.Once(ctx, c, func() bus.Result { t.Fatalf("%s: a duplicate ran", when); return bus.Result{} })
		switch isOther := got.Error != nil && got.Error.Code == bus.CodeBadRequest; {
		case wantOther && !isOther:
			t.Fatalf("%s: another call got %+v, want bad_request", when, got)
		case !wantOther && (got.State != bus.StateSuccess || textOf(got.Output) != "v1"):
			t.Fatalf("%s: the same call got %+v", when, got)
		}
	}
	check("running", ls[1], theirs, true)
	close(release)
	wg.Wait()
	check("recorded", ls[1], theirs, true)
	check("recorded, on its router", ls[0], theirs, true)
	check("recorded, same call", ls[1], mine, false)
	legacy := theirs
	legacy.Digest = ""
	check("recorded, no digest", ls[1], legacy, false)
	ls[0].pending.Store("s.r.c1", pendingResult{res: bus.Result{ID: "c1", State: bus.StateSuccess, Output: bus.Text("v1")}, call: mine.Digest})
	check("pending", ls[0], theirs, true)
	check("pending, same call", ls[0], mine, false)
}
