package client

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// The requester's pure parts, without a server.

func TestRequesterEvent(t *testing.T) {
	rq := &requester{subj: bus.NewSubjects(""), source: "agent-1"}
	for _, tc := range []struct {
		name, session string
		ok            bool
	}{
		{"a session", "s-1", true},
		{"none (deployment verbs)", "", true},
		{"a dot", "s.1", false},
		{"a wildcard", "*", false},
		{"too long", string(make([]byte, 129)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := rq.event(bus.TypeAdmin, tc.session, struct{}{})
			if (err == nil) != tc.ok {
				t.Fatalf("event(%q) error %v, want ok %v", tc.session, err, tc.ok)
			}
			if err != nil {
				if !errors.Is(err, bus.ErrBadEvent) {
					t.Fatalf("error %v is not bad_event", err)
				}
				return
			}
			if e.Source != "agent-1" || e.SessionID != tc.session || e.Type != bus.TypeAdmin {
				t.Fatalf("event %+v", e)
			}
		})
	}
}

func TestRequesterBatchEventEchoesRevision(t *testing.T) {
	rq := &requester{subj: bus.NewSubjects(""), source: "agent-1"}
	rev := func(session string, b bus.Batch) uint64 {
		t.Helper()
		e, err := rq.batchEvent(session, b, []CallOption{WithReplyID("r1")})
		if err != nil {
			t.Fatal(err)
		}
		var got bus.Batch
		if err := e.DataAs(&got); err != nil || e.ID != "r1" {
			t.Fatalf("batch event %+v: %v", e, err)
		}
		return got.SessionRev
	}
	if got := rev("s1", bus.Batch{}); got != 0 {
		t.Fatalf("sessionrev %d before any reply", got)
	}
	rq.revs.saw("s1", 7)
	rq.revs.saw("s1", 5) // older: kept 7
	for _, tc := range []struct {
		session string
		b       bus.Batch
		want    uint64
	}{
		{"s1", bus.Batch{}, 7},
		{"s1", bus.Batch{SessionRev: 3}, 3}, // the caller's own wins
		{"s2", bus.Batch{}, 0},
	} {
		if got := rev(tc.session, tc.b); got != tc.want {
			t.Errorf("sessionrev of %s = %d, want %d", tc.session, got, tc.want)
		}
	}
	rq.revs.forget("s1")
	if got := rev("s1", bus.Batch{}); got != 0 {
		t.Fatalf("sessionrev %d after forget", got)
	}
}

func TestIsBusy(t *testing.T) {
	busy, _ := bus.NewEvent(bus.TypeError, "router", bus.Error{Code: bus.CodeBusy, Message: "busy"})
	other, _ := bus.NewEvent(bus.TypeError, "router", bus.Error{Code: bus.CodeBadRequest, Message: "busy"})
	reply, _ := bus.NewEvent(bus.TypeCallReply, "router", map[string]string{"note": "busy"})
	for _, tc := range []struct {
		name string
		e    *bus.Event
		want bool
	}{
		{"busy", busy, true},
		{"another error that says busy", other, false},
		{"a reply that says busy", reply, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.e.Msg("_INBOX.x")
			if err != nil {
				t.Fatal(err)
			}
			if got := isBusy(m); got != tc.want {
				t.Fatalf("isBusy = %v, want %v", got, tc.want)
			}
		})
	}
	if isBusy(&nats.Msg{Data: []byte(`"busy"` + string(make([]byte, 5000)))}) {
		t.Fatal("a big reply was decoded as busy")
	}
}
