package session

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestAttack42bCancelledMarksWorstSize (held): an agent cancelling built-ins
// again and again, each with the longest ids a batch may carry (a reply id
// and a call id of 128 characters, bus.ValidID), and the same call many
// times over, grows its session record by at most MaxCancelled marks: what
// every later write of the session encodes and every router reads.
func TestAttack42bCancelledMarksWorstSize(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	st, err := store.Setup(t.Context(), testkit.JetStream(t, nc), bus.NewSubjects(""), store.Config{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(st.Sessions, Config{})
	ctx := t.Context()
	if _, err := s.Update(ctx, "s1", func(*Session) error { return nil }); err != nil {
		t.Fatal(err)
	}
	e0, err := st.Sessions.Get(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	long := func(c byte, i int) string {
		id := fmt.Sprintf("%c%d", c, i)
		return id + strings.Repeat("x", 128-len(id))
	}
	for i := range 3 * MaxCancelled { // more cancels than marks kept, every id at its longest
		reply := long('r', i)
		if !bus.ValidID(reply) {
			t.Fatalf("id %q is not valid", reply)
		}
		if err := s.Forestall(ctx, "s1", reply, []string{long('c', i), long('c', i)}); err != nil {
			t.Fatal(err)
		}
	}
	e, err := st.Sessions.Get(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var sess Session
	if err := json.Unmarshal(e.Value(), &sess); err != nil {
		t.Fatal(err)
	}
	mark := len(`{"call":"","at":"2006-01-02T15:04:05.999999999Z"},`) + 2*128 + 1
	grown := len(e.Value()) - len(e0.Value())
	t.Logf("the record: %d bytes with no mark, %d with %d marks of the longest ids (%d bytes each at most)", len(e0.Value()), len(e.Value()), len(sess.Cancelled), mark)
	if len(sess.Cancelled) != MaxCancelled || grown > MaxCancelled*mark+len(`,"cancelled":[]`) {
		t.Fatalf("%d marks, the record grew %d bytes: past the bound of %d marks of %d bytes", len(sess.Cancelled), grown, MaxCancelled, mark)
	}
}
