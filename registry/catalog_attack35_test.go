package registry_test

import (
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/store"
)

// TestAttackMarkersKeepRoom (session 35, red team on 7.1's bound): each
// name deleted leaves a delete marker, which the stream counts toward
// max_msgs until the name is written again. A delete raises max_msgs by
// one, and a router's start sets it to HardMsgs plus the markers held, so
// deleting an attacker's names frees them for new ones, across a restart
// (before: a restart set HardMsgs, the markers ate the margin).
func TestAttackMarkersKeepRoom(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	setup := func() *store.Store {
		st, err := store.Setup(t.Context(), testkit.JetStream(t, nc), bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: hb, MaxTools: 8})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := setup()
	r := start(t, st, registry.Config{})
	for i := range 8 {
		accepted(t, register(t, r, "w", def(fmt.Sprintf("t%d", i), external)), fmt.Sprintf("t%d", i))
	}
	for i := range 8 {
		if err := r.Delete(t.Context(), fmt.Sprintf("t%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	maxMsgs := func() int64 {
		s, err := st.JS.Stream(t.Context(), "KV_"+bus.NewSubjects("").Bucket(bus.BucketTools))
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.Config.MaxMsgs
	}
	want := store.HardMsgs(8) + 8
	if got := maxMsgs(); got != want {
		t.Fatalf("after 8 deletes: max_msgs %d, want %d", got, want)
	}
	setup() // a router starting
	if got := maxMsgs(); got != want {
		t.Fatalf("after a restart: max_msgs %d, want %d", got, want)
	}
}
