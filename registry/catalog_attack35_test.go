package registry_test

import (
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
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

// TestAttackGroupMarkersKeepRoom: the same for groups (groups.delete): a
// deleted group's marker raises P_groups' max_msgs by one, so the
// operator's clean-up frees the bound's room, not only the margin's.
func TestAttackGroupMarkersKeepRoom(t *testing.T) {
	st := boundedStore(t, -1, 4)
	g := groups.New(st, groups.Config{})
	if err := g.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, g.Stop)
	for i := range 4 {
		if err := g.Register(t.Context(), bus.Group{Name: fmt.Sprintf("g%d", i), Scope: bus.ScopeMeta}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if err := g.Delete(t.Context(), fmt.Sprintf("g%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := st.JS.Stream(t.Context(), "KV_"+bus.NewSubjects("").Bucket(bus.BucketGroups))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := store.HardMsgs(4) + 4; info.Config.MaxMsgs != want {
		t.Fatalf("after 4 group deletes: max_msgs %d, want %d", info.Config.MaxMsgs, want)
	}
}
