package registry_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/store"
)

// boundedStore is a memory store whose catalogue takes tools and groups
// names; the others' Setup runs first, on the same server.
func boundedStore(t *testing.T, tools, groups int) *store.Store {
	t.Helper()
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	st, err := store.Setup(t.Context(), js, bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: hb, MaxTools: tools, MaxGroups: groups})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCatalogBound: a new name past --max-tools is refused limit_exceeded,
// nothing written; a held name is taken (a beat, an update); a delete frees
// room; on P.register.<tool> and on the shared subject alike; groups the same.
func TestCatalogBound(t *testing.T) {
	st := boundedStore(t, 3, 2)
	r := start(t, st, registry.Config{})
	accepted(t, register(t, r, "w1", def("a"), def("b", external), def("c")), "a", "b", "c")
	refused := func(ack bus.RegisterAck, err error, name string) {
		t.Helper()
		if err != nil || len(ack.Accepted) != 0 || len(ack.Rejected) != 1 || ack.Rejected[0].Name != name ||
			!strings.HasPrefix(ack.Rejected[0].Reason, "limit_exceeded: the catalogue holds 3 tools, the routers' bound (router --max-tools)") {
			t.Fatalf("ack %+v, err %v: want %s refused limit_exceeded", ack, err, name)
		}
		if _, err := st.Tools.Get(t.Context(), name); !store.IsNotFound(err) {
			t.Fatalf("%s was written: %v", name, err)
		}
	}
	for _, tc := range []struct {
		name string
		reg  func() (bus.RegisterAck, error)
		want string // accepted, or "" for refused
	}{
		{"d: a new name on its subject", func() (bus.RegisterAck, error) {
			return r.Register(t.Context(), "d", "", bus.Register{Worker: "w2", Tools: []bus.ToolDef{def("d")}})
		}, ""},
		{"e: a new name on the shared subject", func() (bus.RegisterAck, error) {
			return r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: "w2", Tools: []bus.ToolDef{def("e", external)}})
		}, ""},
		{"a beat of a held name", func() (bus.RegisterAck, error) {
			return r.Register(t.Context(), "a", "", bus.Register{Worker: "w1", Tools: []bus.ToolDef{def("a")}})
		}, "a"},
		{"an update of a held name", func() (bus.RegisterAck, error) {
			return r.Register(t.Context(), "b", "", bus.Register{Worker: "w1", Tools: []bus.ToolDef{def("b", external, described("New."))}})
		}, "b"},
		{"a held name after a restart (another worker)", func() (bus.RegisterAck, error) {
			return r.Register(t.Context(), "c", "", bus.Register{Worker: "w9", Tools: []bus.ToolDef{def("c")}})
		}, "c"},
	} {
		ack, err := tc.reg()
		if tc.want == "" {
			refused(ack, err, tc.name[:1])
			continue
		}
		if err != nil || len(ack.Accepted) != 1 || ack.Accepted[0] != tc.want {
			t.Fatalf("%s: ack %+v, err %v", tc.name, ack, err)
		}
	}
	if err := r.Delete(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	accepted(t, register(t, r, "w2", def("d")), "d")
	ack, err := r.Register(t.Context(), "e", "", bus.Register{Worker: "w2", Tools: []bus.ToolDef{def("e")}})
	refused(ack, err, "e")

	g := groups.New(st, groups.Config{})
	if err := g.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, g.Stop)
	group := func(name, desc string) error {
		return g.Register(t.Context(), bus.Group{Name: name, Description: desc, Scope: bus.ScopeMeta})
	}
	for _, name := range []string{"g1", "g2"} {
		if err := group(name, ""); err != nil {
			t.Fatal(err)
		}
	}
	var be *bus.Error
	if err := group("g3", ""); !errors.As(err, &be) || be.Code != bus.CodeLimitExceeded || !strings.Contains(be.Message, "2 groups, the routers' bound (router --max-groups)") {
		t.Fatalf("a third group: %v", err)
	}
	if err := group("g1", "Changed."); err != nil {
		t.Fatalf("an update of a held group: %v", err)
	}
	if err := g.Delete(t.Context(), "g2"); err != nil {
		t.Fatal(err)
	}
	if err := group("g3", ""); err != nil {
		t.Fatalf("a group after a delete: %v", err)
	}
	// The operator's groups (the config file, groups.put) are taken past it.
	if err := g.Put(t.Context(), bus.Group{Name: "ops", Scope: bus.ScopeMeta}); err != nil {
		t.Fatalf("the operator's group past the bound: %v", err)
	}
}

// TestCatalogHardBound: the stream's max_msgs (HardMsgs) refuses a new name
// that a router's own bound let through (a router of 1.24, or one given a
// larger bound), limit_exceeded, and keeps taking held names; a bucket that
// holds more already keeps room above what it holds (the upgrade guard).
func TestCatalogHardBound(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	setup := func(tools int) *store.Store {
		st, err := store.Setup(t.Context(), testkit.JetStream(t, nc), bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: hb, MaxTools: tools})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	loose := setup(1000)
	setup(3) // max_msgs 3 + 64 + store.BuiltinRoom
	r := start(t, loose, registry.Config{})
	hard := int(store.HardMsgs(3))
	for i := range hard {
		accepted(t, register(t, r, "w", def(fmt.Sprintf("t%d", i), external)), fmt.Sprintf("t%d", i))
	}
	ack := register(t, r, "w", def("past", external))
	if len(ack.Rejected) != 1 || !strings.HasPrefix(ack.Rejected[0].Reason, "limit_exceeded: the stored catalogue of tools is at its stream's max_msgs") {
		t.Fatalf("past the hard bound: %+v", ack)
	}
	accepted(t, register(t, r, "w", def("t0", external, described("Held."))), "t0")
	s, err := loose.JS.Stream(t.Context(), "KV_"+bus.NewSubjects("").Bucket(bus.BucketTools))
	if err != nil {
		t.Fatal(err)
	}
	setup(3) // the guard: what it holds plus the margin and the built-ins' room
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(hard + 64 + store.BuiltinRoom); info.Config.MaxMsgs != want {
		t.Fatalf("max_msgs %d over %d held, want %d", info.Config.MaxMsgs, hard, want)
	}
}
