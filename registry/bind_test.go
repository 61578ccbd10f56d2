package registry_test

import (
	"errors"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/store"
)

// TestBinding: a worker id's key is bound to the NATS account that stored it
// first (protocol 7.1, 1.20). Two routers and one started later share the
// binding through P_workers; from another account (or none) a beat, a leave
// or a new definition is refused denied with nothing changed, until the
// record expires.
func TestBinding(t *testing.T) {
	st := newStore(t)
	clk := newClock(time.Now())
	r0 := start(t, st, registry.Config{Now: clk.Now})
	r1 := start(t, st, registry.Config{Now: clk.Now})
	reg := func(r *registry.Registry, account string, leaving bool, d bus.ToolDef) error {
		_, err := r.Register(t.Context(), "greet", account, bus.Register{Worker: "w1", Tools: []bus.ToolDef{d}, Leaving: leaving,
			InFlight: map[string][]string{"greet": {}}})
		return err
	}
	steps := []struct {
		name    string
		r       *registry.Registry
		account string
		leaving bool
		d       bus.ToolDef
		denied  bool
	}{
		{"first sight binds", r0, "acc-a", false, def("greet"), false},
		{"the same account on another router", r1, "acc-a", false, def("greet"), false},
		{"another account's beat", r0, "acc-b", false, def("greet"), true},
		{"another account's beat on the other router", r1, "acc-b", false, def("greet"), true},
		{"another account's leave", r0, "acc-b", true, def("greet"), true},
		{"another account's definition", r1, "acc-b", false, def("greet", described("Forged.")), true},
		{"no account (a message without the server's header)", r0, "", false, def("greet"), true},
		{"no account's leave", r1, "", true, def("greet"), true},
		{"the same account again", r0, "acc-a", false, def("greet"), false},
	}
	for _, s := range steps {
		before := lastSeq(t, st.Workers)
		err := reg(s.r, s.account, s.leaving, s.d)
		var be *bus.Error
		if got := errors.As(err, &be) && be.Code == bus.CodeDenied; got != s.denied || !s.denied && err != nil {
			t.Fatalf("%s: %v, want denied %v", s.name, err, s.denied)
		}
		if s.denied && lastSeq(t, st.Workers) != before {
			t.Fatalf("%s: refused, yet P_workers was written", s.name)
		}
	}
	later := start(t, st, registry.Config{Now: clk.Now}) // a router started since: the binding from its load
	if err := reg(later, "acc-b", true, def("greet")); err == nil {
		t.Fatal("a router started later took another account's leave")
	}
	for _, r := range []*registry.Registry{r0, r1, later} {
		if tool, _ := r.Lookup("greet"); !live(t, r, "greet") || tool.Def.Description != "Tool greet." {
			t.Fatalf("after the refusals: live %v, definition %+v", live(t, r, "greet"), tool.Def)
		}
	}
	if e, err := st.Workers.Get(t.Context(), "greet.w1"); err != nil || string(e.Value()) != `{"inflight":[],"account":"acc-a"}` {
		t.Fatalf("the stored beat: %v, %v", e, err)
	}

	// The cache's beat is old, the record still lives: the compare-and-set refuses.
	clk.Add(3*hb + time.Second)
	if err := reg(r0, "acc-b", false, def("greet")); err == nil {
		t.Fatal("another account took a live record the cache held as old")
	}
	// The record expires (the bucket's TTL, three heartbeats): the id is free.
	testkit.CheckFor(t, bound, hb/20, func() error {
		if _, err := st.Workers.Get(t.Context(), "greet.w1"); !store.IsNotFound(err) {
			return errors.New("greet.w1's record has not expired")
		}
		return nil
	})
	if err := reg(r0, "acc-b", false, def("greet")); err != nil {
		t.Fatalf("another account after the record expired: %v", err)
	}
	if err := reg(r1, "acc-a", false, def("greet")); err == nil {
		t.Fatal("the first account, now that another holds the id")
	}
}

// BenchmarkBeat is one beat of one tool, as on P.register.<t>: the binding's
// check and its account in the stored value, against none (session 30).
//
//	go test -run - -bench 'Beat$' ./registry/
func BenchmarkBeat(b *testing.B) {
	r := benchRegistry(b)
	for _, account := range []string{"", "toolbus-worker-deployer"} {
		b.Run("account="+account, func(b *testing.B) {
			reg := bus.Register{Worker: "w" + account, Tools: []bus.ToolDef{def("greet")}, InFlight: map[string][]string{"greet": {}}}
			for b.Loop() {
				if _, err := r.Register(b.Context(), "greet", account, reg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
