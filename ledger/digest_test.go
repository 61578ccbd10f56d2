package ledger

import (
	"context"
	"encoding/json"
	"strings"
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
		compact, canon := bus.CallDigests(c.Name, c.Input)
		return Call{Key: "s.r.c1", Call: c, Digest: compact, Canon: canon, Timeout: time.Minute}
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
		got, landed := l.Once(ctx, c, func() bus.Result { t.Fatalf("%s: a duplicate ran", when); return bus.Result{} })
		if landed {
			t.Fatalf("%s: a duplicate says its own record landed", when)
		}
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
	legacy.Digest, legacy.Canon = "", ""
	check("recorded, no digest", ls[1], legacy, false)
	ls[0].pending.Store("s.r.c1", pendingResult{res: bus.Result{ID: "c1", State: bus.StateSuccess, Output: bus.Text("v1")}, call: digests{mine.Digest, mine.Canon}})
	check("pending", ls[0], theirs, true)
	check("pending, same call", ls[0], mine, false)
}

// A copy whose input holds the same JSON value in another encoding
// (members in another order, numbers and strings written otherwise) is the
// same call (1.13): it gets the claim's result and does not run, from a
// claim of a router of 1.13. A claim of a router of 1.12 (1.12's digest
// only) tells it apart as 1.12 did, unless the claim's input was sent in
// the canonical form; and a router of 1.12 (1.12's digest only) compares a
// claim of 1.13 as it compared one of 1.12.
func TestDuplicateEncodedAgain(t *testing.T) {
	ls := newTestLedger(t, "a", "b")
	call := func(key, input string, canon bool) Call {
		c := bus.Call{ID: "c1", Name: "write", Input: json.RawMessage(input)}
		compact, digest := bus.CallDigests(c.Name, c.Input)
		lc := Call{Key: key, Call: c, Digest: compact, Timeout: time.Minute}
		if canon {
			lc.Canon = digest
		}
		return lc
	}
	const (
		sent      = `{"path":"/x","data":{"n":1.0,"s":"\u00e9"}}`
		again     = `{"data":{"s":"é","n":1},"path":"/x"}`
		canonical = `{"data":{"n":1,"s":"é"},"path":"/x"}`
		another   = `{"data":{"s":"é","n":2},"path":"/x"}`
	)
	for _, tc := range []struct {
		name                 string
		first, dup           string
		firstCanon, dupCanon bool // written (and compared) by a router of 1.13
		wantOther            bool
	}{
		{"1.13 claim, copy encoded again", sent, again, true, true, false},
		{"1.13 claim, copy of another value", sent, another, true, true, true},
		{"1.13 claim, the same bytes", sent, sent, true, true, false},
		{"1.12 claim, copy encoded again", sent, again, false, true, true},
		{"1.12 claim, the same bytes", sent, sent, false, true, false},
		{"1.12 claim sent canonical, copy encoded again", canonical, again, false, true, false},
		{"1.12 claim sent canonical, copy of another value", canonical, another, false, true, true},
		{"1.12 router, 1.13 claim, the same bytes", sent, sent, true, false, false},
		{"1.12 router, 1.13 claim, copy encoded again", sent, again, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "s.r" + strings.NewReplacer(" ", "", ",", "", ".", "").Replace(tc.name) + ".c1"
			first, landed := ls[0].Once(t.Context(), call(key, tc.first, tc.firstCanon), func() bus.Result {
				return bus.Result{ID: "c1", Name: "write", State: bus.StateSuccess, Output: bus.Text("v1")}
			})
			if first.State != bus.StateSuccess || !landed {
				t.Fatalf("first run: %+v, landed %v", first, landed)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			got, _ := ls[1].Once(ctx, call(key, tc.dup, tc.dupCanon), func() bus.Result { t.Fatal("the copy ran"); return bus.Result{} })
			switch isOther := got.Error != nil && got.Error.Code == bus.CodeBadRequest; {
			case tc.wantOther && !isOther:
				t.Fatalf("got %+v, want bad_request", got)
			case !tc.wantOther && (got.State != bus.StateSuccess || textOf(got.Output) != "v1"):
				t.Fatalf("got %+v, want the first run's result", got)
			}
		})
	}
}
