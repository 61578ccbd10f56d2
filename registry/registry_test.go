package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/store"
)

const (
	bound = 10 * time.Second
	hb    = time.Second // the heartbeat of these tests
)

// newStore starts a server and creates the buckets of the default prefix.
func newStore(t *testing.T) *store.Store {
	t.Helper()
	nc := testkit.Connect(t, testkit.RunServer(t))
	js := testkit.JetStream(t, nc)
	st, err := store.Setup(t.Context(), js, bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: hb})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// start returns a started Registry, stopped when the test ends.
func start(t *testing.T, st *store.Store, cfg registry.Config) *registry.Registry {
	t.Helper()
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = hb
	}
	r := registry.New(st, cfg)
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, r.Stop)
	return r
}

// clock is a settable Config.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock(at time.Time) *clock { return &clock{now: at} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var objectSchema = json.RawMessage(`{"type":"object","properties":{}}`)

// def is a valid definition named name; mods adjust it.
func def(name string, mods ...func(*bus.ToolDef)) bus.ToolDef {
	d := bus.ToolDef{Name: name, Description: "Tool " + name + ".", InputSchema: objectSchema}
	for _, m := range mods {
		m(&d)
	}
	return d
}

func described(desc string) func(*bus.ToolDef) { return func(d *bus.ToolDef) { d.Description = desc } }

func external(d *bus.ToolDef) { d.External = true }

// register applies one registration of worker and fails the test on error.
func register(t *testing.T, r *registry.Registry, worker string, defs ...bus.ToolDef) bus.RegisterAck {
	t.Helper()
	ack, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: worker, Tools: defs})
	if err != nil {
		t.Fatalf("register %s: %v", worker, err)
	}
	return ack
}

// accepted fails unless ack accepted exactly names and rejected nothing.
func accepted(t *testing.T, ack bus.RegisterAck, names ...string) {
	t.Helper()
	if !slices.Equal(ack.Accepted, names) || len(ack.Rejected) != 0 {
		t.Fatalf("ack %+v, want accepted %v", ack, names)
	}
}

func names(tools []*registry.Tool) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Def.Name)
	}
	return out
}

func live(t *testing.T, r *registry.Registry, name string) bool {
	t.Helper()
	tool, ok := r.Lookup(name)
	if !ok {
		t.Fatalf("%s not registered", name)
	}
	return r.Live(tool)
}

// lastSeq is the last sequence of a bucket's stream: it moves on every write.
func lastSeq(t *testing.T, kv jetstream.KeyValue) uint64 {
	t.Helper()
	st, err := kv.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
}

func TestRegisterValidation(t *testing.T) {
	st := newStore(t)
	r := start(t, st, registry.Config{})
	for _, tc := range []struct {
		name   string
		defs   []bus.ToolDef
		ok     []string
		reject string // the rejected tool, "" for none
		reason string // a part of the rejection's reason
	}{
		{"valid", []bus.ToolDef{def("get_weather")}, []string{"get_weather"}, "", ""},
		{"every field", []bus.ToolDef{def("deploy", func(d *bus.ToolDef) {
			d.Groups, d.ReadOnly, d.Idempotent, d.TimeoutMS, d.MaxAttempts = []string{"ops", "basic"}, true, true, 1000, 3
			d.Permission, d.RuleMatcher, d.RuleField = bus.PermissionAsk, bus.MatcherCommand, "cmd"
			d.OutputSchema = json.RawMessage(`{"type":"object"}`)
			d.MCP = &bus.MCPRef{Server: "fs", Tool: "read.file"}
		})}, []string{"deploy"}, "", ""},
		{"no schema", []bus.ToolDef{def("noschema", func(d *bus.ToolDef) { d.InputSchema = nil })}, nil, "noschema", "input_schema is missing"},
		{"null schema", []bus.ToolDef{def("nullschema", func(d *bus.ToolDef) { d.InputSchema = json.RawMessage(`null`) })}, nil, "nullschema", "input_schema is missing"},
		{"invalid name", []bus.ToolDef{def("get.weather")}, nil, "get.weather", `name "get.weather" must match ^[A-Za-z0-9_-]{1,64}$`},
		{"empty name", []bus.ToolDef{def("")}, nil, "", `name "" must match`},
		{"name too long", []bus.ToolDef{def(strings.Repeat("n", 65))}, nil, strings.Repeat("n", 65), "must match"},
		{"invalid group", []bus.ToolDef{def("g", func(d *bus.ToolDef) { d.Groups = []string{"a b"} })}, nil, "g", `group name "a b" must match`},
		{"schema not JSON", []bus.ToolDef{def("s1", func(d *bus.ToolDef) { d.InputSchema = json.RawMessage(`{"type":`) })}, nil, "s1", "input_schema: schema is not valid JSON"},
		{"schema does not compile", []bus.ToolDef{def("s2", func(d *bus.ToolDef) {
			d.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"strin"}}}`)
		})}, nil, "s2", "input_schema:"},
		{"schema not an object schema", []bus.ToolDef{def("s3", func(d *bus.ToolDef) { d.InputSchema = json.RawMessage(`{"type":"string"}`) })}, nil, "s3", `input_schema: schema must have "type": "object"`},
		{"schema is an array", []bus.ToolDef{def("s4", func(d *bus.ToolDef) { d.InputSchema = json.RawMessage(`[{"type":"object"}]`) })}, nil, "s4", "input_schema: schema must be a JSON object"},
		{"external $ref", []bus.ToolDef{def("s5", func(d *bus.ToolDef) {
			d.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}}}`)
		})}, nil, "s5", `external $ref "https://example.com/a.json" is not allowed`},
		{"bad output schema", []bus.ToolDef{def("o1", func(d *bus.ToolDef) { d.OutputSchema = json.RawMessage(`{"type":"object","properties":5}`) })}, nil, "o1", "output_schema:"},
		{"bad permission", []bus.ToolDef{def("p1", func(d *bus.ToolDef) { d.Permission = "sometimes" })}, nil, "p1", `permission "sometimes" must be passthrough, allow or ask`},
		{"bad rule matcher", []bus.ToolDef{def("m1", func(d *bus.ToolDef) { d.RuleMatcher = "regex" })}, nil, "m1", `rule_matcher "regex" must be none, command or path`},
		{"rule matcher without rule field", []bus.ToolDef{def("m2", func(d *bus.ToolDef) { d.RuleMatcher = bus.MatcherPath })}, nil, "m2", "rule_field is required with rule_matcher path"},
		{"relative path base", []bus.ToolDef{def("m3", func(d *bus.ToolDef) { d.PathBase = "srv/app" })}, nil, "m3", `path_base "srv/app" must be a clean absolute path`},
		{"background and no_background", []bus.ToolDef{def("m4", func(d *bus.ToolDef) { d.Background, d.NoBackground = true, true })}, nil, "m4",
			"background and no_background contradict each other: a tool either goes on in the background past its timeout or never does"},
		{"duplicate in one registration", []bus.ToolDef{def("dup"), def("dup", described("Another."))}, []string{"dup"}, "dup", "defined twice in one registration"},
		{"valid and invalid together", []bus.ToolDef{def("bad name"), def("fine")}, []string{"fine"}, "bad name", "must match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ack := register(t, r, "w1", tc.defs...)
			if !slices.Equal(ack.Accepted, tc.ok) && !(len(ack.Accepted) == 0 && len(tc.ok) == 0) {
				t.Fatalf("accepted %v, want %v", ack.Accepted, tc.ok)
			}
			if tc.reason == "" {
				if len(ack.Rejected) != 0 {
					t.Fatalf("rejected %+v", ack.Rejected)
				}
			} else {
				if len(ack.Rejected) != 1 || ack.Rejected[0].Name != tc.reject || !strings.Contains(ack.Rejected[0].Reason, tc.reason) {
					t.Fatalf("rejected %+v, want %q with a reason containing %q", ack.Rejected, tc.reject, tc.reason)
				}
				if tc.reject != "dup" {
					if _, ok := r.Lookup(tc.reject); ok {
						t.Errorf("rejected tool %q is registered", tc.reject)
					}
					if bus.ValidName(tc.reject) {
						if _, err := st.Tools.Get(t.Context(), tc.reject); !store.IsNotFound(err) {
							t.Errorf("rejected tool %q stored: %v", tc.reject, err)
						}
					}
				}
			}
			for _, n := range tc.ok {
				if !live(t, r, n) {
					t.Errorf("accepted tool %s is not live", n)
				}
				if _, err := st.Tools.Get(t.Context(), n); err != nil {
					t.Errorf("accepted tool %s not stored: %v", n, err)
				}
			}
		})
	}
	// The first of two definitions with one name wins.
	if tool, _ := r.Lookup("dup"); tool.Def.Description != "Tool dup." {
		t.Errorf("dup is %q", tool.Def.Description)
	}
	// Defaults are applied before storing.
	if tool, _ := r.Lookup("get_weather"); tool.Def.TimeoutMS != bus.DefaultTimeoutMS || tool.Def.MaxAttempts != 1 ||
		tool.Def.Permission != bus.PermissionPassthrough || tool.Def.RuleMatcher != bus.MatcherNone {
		t.Errorf("defaults not applied: %+v", tool.Def)
	}
}

func TestRegisterBadWorker(t *testing.T) {
	r := start(t, newStore(t), registry.Config{})
	for _, w := range []string{"", "w.1", "w 1", strings.Repeat("w", 129)} {
		_, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: w, Tools: []bus.ToolDef{def("t")}})
		if !errors.Is(err, bus.ErrBadRequest) {
			t.Errorf("worker %q: err %v, want bad_request", w, err)
		}
	}
	if _, ok := r.Lookup("t"); ok {
		t.Fatal("a registration of a bad worker id was stored")
	}
}

// TestRegisterSameValueIsNoConflict: definitions are compared as JSON
// values once defaults are applied, so two workers (written in different
// languages) whose schemas differ only in member order and spelling share
// the tool, and the stored definition is not rewritten.
func TestRegisterSameValueIsNoConflict(t *testing.T) {
	st := newStore(t)
	r := start(t, st, registry.Config{})
	schema := func(s string) func(*bus.ToolDef) { return func(d *bus.ToolDef) { d.InputSchema = json.RawMessage(s) } }
	accepted(t, register(t, r, "go-worker", def("t", schema(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}`))), "t")
	before := lastSeq(t, st.Tools)
	accepted(t, register(t, r, "js-worker", def("t", schema(`{
		"required": ["city"],
		"properties": {"days": {"type": "integer"}, "city": {"type": "string"}},
		"type": "object"
	}`), func(d *bus.ToolDef) {
		d.TimeoutMS, d.Permission, d.OutputSchema = bus.DefaultTimeoutMS, bus.PermissionPassthrough, json.RawMessage("null")
	})), "t")
	if len(r.Workers()["t"]) != 2 {
		t.Fatalf("workers %v, want 2 for t", r.Workers())
	}
	if after := lastSeq(t, st.Tools); after != before {
		t.Errorf("an equal definition was rewritten (seq %d → %d)", before, after)
	}
}

func TestRegisterConflict(t *testing.T) {
	st := newStore(t)
	clk := newClock(time.Now())
	r := start(t, st, registry.Config{Now: clk.Now})
	accepted(t, register(t, r, "w1", def("t", described("A"))), "t")

	// Another worker with a different definition is refused while w1 lives.
	ack := register(t, r, "w2", def("t", described("B")))
	if len(ack.Accepted) != 0 || len(ack.Rejected) != 1 || !strings.HasPrefix(ack.Rejected[0].Reason, `conflicts with a different live definition of "t" (they differ in description);`) {
		t.Fatalf("conflicting registration: %+v", ack)
	}
	if tool, _ := r.Lookup("t"); tool.Def.Description != "A" {
		t.Fatalf("definition replaced by a conflicting one: %q", tool.Def.Description)
	}
	if len(r.Workers()["t"]) != 1 {
		t.Fatalf("a rejected worker counts as live: %v", r.Workers())
	}
	// The same definition from another worker is no conflict.
	accepted(t, register(t, r, "w3", def("t", described("A"))), "t")
	if w := r.Workers()["t"]; !slices.Equal(w, []string{"w1", "w3"}) { // their ids, sorted
		t.Fatalf("workers %v, want w1 and w3 for t", r.Workers())
	}
	// Still refused while any worker serves A.
	if ack := register(t, r, "w2", def("t", described("B"))); len(ack.Rejected) != 1 {
		t.Fatalf("conflict with w3 alive: %+v", ack)
	}
	// Once the workers serving A left, B may replace it.
	for _, w := range []string{"w1", "w3"} {
		if _, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: w, Leaving: true}); err != nil {
			t.Fatal(err)
		}
	}
	waitNotLive(t, r, "t") // see TestLeavingIsImmediate
	accepted(t, register(t, r, "w2", def("t", described("B"))), "t")
	if tool, _ := r.Lookup("t"); tool.Def.Description != "B" {
		t.Fatalf("Lookup after replacement: %q", tool.Def.Description)
	}
	e, err := st.Tools.Get(t.Context(), "t")
	if err != nil || !strings.Contains(string(e.Value()), `"description":"B"`) {
		t.Fatalf("KV after replacement: %v %s", err, e.Value())
	}
	// A worker may change its own definition.
	accepted(t, register(t, r, "w2", def("t", described("B2"))), "t")
	// A definition whose workers all missed three beats may be replaced too.
	clk.Add(3*hb + time.Minute)
	accepted(t, register(t, r, "w4", def("t", described("C"))), "t")
	if tool, _ := r.Lookup("t"); tool.Def.Description != "C" {
		t.Fatalf("Lookup after expiry replacement: %q", tool.Def.Description)
	}
}

func TestLeavingRemovesLiveness(t *testing.T) {
	st := newStore(t)
	r := start(t, st, registry.Config{})
	accepted(t, register(t, r, "w1", def("a"), def("b")), "a", "b")
	if _, err := st.Workers.Get(t.Context(), "a.w1"); err != nil {
		t.Fatalf("liveness key a.w1: %v", err)
	}
	if _, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: "w1", Leaving: true}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		// Leaving overwrites the beat with a "left" marker (a delete could be
		// overtaken by a beat still in flight); it expires with the bucket TTL.
		e, err := st.Workers.Get(t.Context(), n+".w1")
		if err == nil && string(e.Value()) != `{"left":true}` {
			t.Errorf("liveness key %s.w1 after leaving: %s", n, e.Value())
		} else if err != nil && !store.IsNotFound(err) {
			t.Errorf("liveness key %s.w1 after leaving: %v", n, err)
		}
	}
	// (That they are not live at once is TestLeavingIsImmediate.)
	waitNotLive(t, r, "a", "b")
	// The definitions stay; leaving twice is fine.
	if _, ok := r.Lookup("a"); !ok {
		t.Error("definition removed by leaving")
	}
	if _, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: "w1", Leaving: true}); err != nil {
		t.Fatal(err)
	}
}

// waitNotLive polls until none of the named tools is live in r.
func waitNotLive(t *testing.T, r *registry.Registry, names ...string) {
	t.Helper()
	testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
		for _, n := range names {
			if live(t, r, n) {
				return fmt.Errorf("%s still live", n)
			}
		}
		return nil
	})
}

// TestLeavingIsImmediate checks docs/protocol.md 7 ("leaving": true removes the
// worker at once) on the registry that handled the leaving: once Register
// returned, its tools must not be live, not even for a moment. The race it
// looks for is narrow, so it tries many times; it passes when the race did
// not happen.
func TestLeavingIsImmediate(t *testing.T) {
	st := newStore(t)
	r := start(t, st, registry.Config{})
	for i := range 100 {
		w := fmt.Sprint("w", i)
		accepted(t, register(t, r, w, def("a"), def("b")), "a", "b")
		if _, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: w, Leaving: true}); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			for _, n := range []string{"a", "b"} {
				if live(t, r, n) {
					t.Fatalf("%s is live again after worker %s left (attempt %d): leave removes the worker from the cache, then the watch "+
						"delivers the liveness put of the registration and registry.go applyWorker re-adds it (no revision check), until the "+
						"delete arrives; meanwhile calls are routed to a worker that is gone and a conflicting definition is refused", n, w, i)
				}
			}
		}
		waitNotLive(t, r, "a", "b")
	}
}

// TestReregisterAfterDelete deletes a tool and registers it again at once:
// the definition must be stored again. The race it looks for is narrow, so
// it tries many times; it passes when the race did not happen.
func TestReregisterAfterDelete(t *testing.T) {
	st := newStore(t)
	r := start(t, st, registry.Config{})
	for i := range 100 {
		name := fmt.Sprint("t", i)
		accepted(t, register(t, r, "w1", def(name)), name)
		if err := r.Delete(t.Context(), name); err != nil {
			t.Fatal(err)
		}
		accepted(t, register(t, r, "w1", def(name)), name)
		if _, err := st.Tools.Get(t.Context(), name); err != nil {
			t.Fatalf("%s was accepted again after Delete but is not in the tools bucket (%v, attempt %d): a late delivery of the first put must not undo the delete", name, err, i)
		}
	}
}

func TestHeartbeatDoesNotWrite(t *testing.T) {
	st := newStore(t)
	r := start(t, st, registry.Config{})
	accepted(t, register(t, r, "w1", def("t")), "t")
	e1, err := st.Tools.Get(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	seq := lastSeq(t, st.Tools)
	for _, tc := range []struct {
		name string
		r    *registry.Registry
		d    bus.ToolDef
	}{
		{"same definition", r, def("t")},
		{"defaults spelled out", r, def("t", func(d *bus.ToolDef) {
			d.TimeoutMS, d.MaxAttempts, d.Permission, d.RuleMatcher = bus.DefaultTimeoutMS, 1, "passthrough", "none"
		})},
		{"schema reformatted", r, def("t", func(d *bus.ToolDef) {
			d.InputSchema = json.RawMessage("{ \"type\": \"object\",\n \"properties\": {} }")
		})},
		// A registry that never saw the tool compares with KV instead.
		{"other registry, empty cache", registry.New(st, registry.Config{}), def("t")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			accepted(t, register(t, tc.r, "w1", tc.d), "t")
			if got := lastSeq(t, st.Tools); got != seq {
				t.Fatalf("a heartbeat wrote the tools bucket: last seq %d → %d", seq, got)
			}
		})
	}
	e2, err := st.Tools.Get(t.Context(), "t")
	if err != nil || e2.Revision() != e1.Revision() {
		t.Fatalf("revision %d → %d (%v)", e1.Revision(), e2.Revision(), err)
	}
	// A changed definition is written once.
	accepted(t, register(t, r, "w1", def("t", described("New."))), "t")
	if got := lastSeq(t, st.Tools); got != seq+1 {
		t.Fatalf("a changed definition moved the last seq %d → %d, want one write", seq, got)
	}
}

func TestToolsOrder(t *testing.T) {
	st := newStore(t)
	r := start(t, st, registry.Config{})
	accepted(t, register(t, r, "w1", def("c"), def("a")), "c", "a")
	accepted(t, register(t, r, "w2", def("b")), "b")
	if got := names(r.Tools()); !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Fatalf("Tools %v, want registration order [c a b]", got)
	}
	// Updating a definition keeps its place.
	accepted(t, register(t, r, "w1", def("c", described("Updated.")), def("a")), "c", "a")
	if got := names(r.Tools()); !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Fatalf("Tools after an update %v, want [c a b]", got)
	}
	if tool, _ := r.Lookup("c"); tool.Def.Description != "Updated." {
		t.Fatalf("Lookup after update: %q", tool.Def.Description)
	}
	// A deleted and re-registered tool goes last.
	if err := r.Delete(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	accepted(t, register(t, r, "w1", def("c")), "c")
	if got := names(r.Tools()); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Tools after delete and re-register %v, want [a b c]", got)
	}
}

func TestToolsOrderSeenByLaterRegistry(t *testing.T) {
	st := newStore(t)
	r := start(t, st, registry.Config{})
	accepted(t, register(t, r, "w1", def("a"), def("b"), def("c")), "a", "b", "c")
	accepted(t, register(t, r, "w1", def("a", described("Updated."))), "a")
	if got := names(r.Tools()); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Tools of the registering registry %v", got)
	}
	later := start(t, st, registry.Config{})
	if got := names(later.Tools()); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("a registry started after a definition was updated lists %v, the running one [a b c]", got)
	}
}

func TestLivenessExpiry(t *testing.T) {
	st := newStore(t)
	clk := newClock(time.Now())
	r := start(t, st, registry.Config{Now: clk.Now})
	accepted(t, register(t, r, "w1", def("t"), def("ext", external)), "t", "ext")
	other := start(t, st, registry.Config{Now: clk.Now}) // fed by the watch only
	for _, reg := range []*registry.Registry{r, other} {
		if !live(t, reg, "t") || !live(t, reg, "ext") {
			t.Fatal("not live right after registering")
		}
		if w := reg.Workers(); len(w["t"]) != 1 || len(w["ext"]) != 0 {
			t.Fatalf("Workers %v", w)
		}
	}
	// External tools have no liveness entries.
	if _, err := st.Workers.Get(t.Context(), "ext.w1"); !store.IsNotFound(err) {
		t.Fatalf("external tool has a liveness key: %v", err)
	}
	clk.Add(3*hb + time.Minute)
	for _, reg := range []*registry.Registry{r, other} {
		if live(t, reg, "t") {
			t.Fatal("t still live after three missed heartbeats")
		}
		if !live(t, reg, "ext") {
			t.Fatal("an external tool needs no worker")
		}
		if w := reg.Workers(); len(w) != 0 {
			t.Fatalf("Workers %v after expiry", w)
		}
		if _, ok := reg.Lookup("t"); !ok {
			t.Fatal("definition forgotten with its workers")
		}
	}
	// The external tool stays live after its registering worker left.
	if _, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: "w1", Leaving: true}); err != nil {
		t.Fatal(err)
	}
	if !live(t, r, "ext") {
		t.Fatal("external tool not live after its worker left")
	}
}

func TestLivenessUsesConfigClock(t *testing.T) {
	st := newStore(t)
	r := start(t, st, registry.Config{})
	accepted(t, register(t, r, "w1", def("t")), "t")
	// Two registries whose clocks are an hour off the NATS server's, started
	// after the beat: both should judge the beat by their own clock.
	behind := newClock(time.Now().Add(-time.Hour))
	ahead := newClock(time.Now().Add(time.Hour))
	rb := start(t, st, registry.Config{Now: behind.Now})
	ra := start(t, st, registry.Config{Now: ahead.Now})
	behind.Add(3*hb + time.Second)
	if live(t, rb, "t") || !live(t, ra, "t") {
		t.Fatalf("liveness must follow the registry's own clock: behind live=%v (want false), ahead live=%v (want true)",
			live(t, rb, "t"), live(t, ra, "t"))
	}
}

func TestDelete(t *testing.T) {
	st := newStore(t)
	r := start(t, st, registry.Config{})
	other := start(t, st, registry.Config{})
	accepted(t, register(t, r, "w1", def("t"), def("u")), "t", "u")
	v := r.Version()
	if err := r.Delete(t.Context(), "t"); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("t"); ok {
		t.Fatal("deleted tool still registered")
	}
	if r.Version() == v {
		t.Error("Version unchanged by Delete")
	}
	if _, err := st.Tools.Get(t.Context(), "t"); !store.IsNotFound(err) {
		t.Fatalf("deleted tool in KV: %v", err)
	}
	// The other registry learns of both through its watch, in its own time:
	// poll until it has u and not t (it may never have seen t at all).
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		if got := names(other.Tools()); !slices.Equal(got, []string{"u"}) {
			return fmt.Errorf("other registry Tools %v, want [u]", got)
		}
		return nil
	})
	if err := r.Delete(t.Context(), "never-registered"); err != nil {
		t.Fatalf("Delete of an unknown tool: %v", err)
	}
}

func TestSecondRegistrySeesEverything(t *testing.T) {
	st := newStore(t)
	r := start(t, st, registry.Config{})
	accepted(t, register(t, r, "w1", def("a"), def("ext", external)), "a", "ext")
	accepted(t, register(t, r, "w2", def("b", func(d *bus.ToolDef) { d.Groups = []string{"web"}; d.ReadOnly = true })), "b")
	// Entries that are not definitions or liveness keys are ignored.
	if _, err := st.Tools.Put(t.Context(), "junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Tools.Put(t.Context(), "badschema", []byte(`{"name":"badschema","input_schema":{"type":"string"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Workers.Put(t.Context(), "nodot", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}

	second := registry.New(st, registry.Config{Heartbeat: hb})
	if err := second.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, second.Stop)
	for _, n := range []string{"a", "b", "ext"} {
		want, _ := r.Lookup(n)
		got, ok := second.Lookup(n)
		if !ok || !got.Def.Equal(&want.Def) || got.Schema == nil {
			t.Fatalf("second registry %s: %+v, want %+v", n, got, want)
		}
		if !second.Live(got) {
			t.Errorf("%s not live in the second registry", n)
		}
	}
	for _, n := range []string{"junk", "badschema"} {
		if _, ok := second.Lookup(n); ok {
			t.Errorf("bad entry %s loaded", n)
		}
	}
	if got := names(second.Tools()); !slices.Equal(got, []string{"a", "ext", "b"}) {
		t.Fatalf("second registry Tools %v, want [a ext b]", got)
	}

	// Later registrations, leavings and deletions reach it through the watch.
	v := second.Version()
	accepted(t, register(t, r, "w3", def("c")), "c")
	if _, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: "w1", Leaving: true}); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		c, ok := second.Lookup("c")
		if !ok || !second.Live(c) {
			return errors.New("c not live in the second registry")
		}
		if live(t, second, "a") {
			return errors.New("a still live after w1 left")
		}
		return nil
	})
	if second.Version() == v {
		t.Error("Version unchanged by watched updates")
	}
	if got := names(second.Tools()); !slices.Equal(got, []string{"a", "ext", "b", "c"}) {
		t.Fatalf("second registry Tools %v", got)
	}
	// Stop is safe twice.
	second.Stop(t.Context())
	second.Stop(t.Context())
}

func TestStartEndsWithContext(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := registry.New(st, registry.Config{})
	if err := r.Start(ctx); err == nil {
		r.Stop(t.Context())
		t.Fatal("Start with an ended context succeeded")
	}
	r.Stop(t.Context())
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		d      bus.ToolDef
		reason string
	}{
		{def("ok"), ""},
		{def("x", func(d *bus.ToolDef) { d.Permission = "" }), `permission "" must be passthrough, allow or ask`},
		{def("x", func(d *bus.ToolDef) { d.Defaults(); d.RuleMatcher = bus.MatcherCommand }), "rule_field is required with rule_matcher command"},
		{def("x", func(d *bus.ToolDef) { d.Defaults(); d.InputSchema = json.RawMessage("null") }), "input_schema is missing"},
	} {
		t.Run(fmt.Sprintf("%s/%s", tc.d.Name, tc.reason), func(t *testing.T) {
			d := tc.d
			if tc.reason == "" {
				d.Defaults()
			}
			reason, s := registry.Check(&d)
			if !strings.Contains(reason, tc.reason) || (tc.reason == "") != (reason == "") {
				t.Fatalf("Check = %q, want %q", reason, tc.reason)
			}
			if (s != nil) != (reason == "") {
				t.Fatalf("schema %v with reason %q", s, reason)
			}
		})
	}
}

// TestExecFormMixedFleet: a tool's exec form is the one every live worker
// reads (docs/protocol.md 5.1): a worker of 1.15 (binary_exec only) beside
// a compact one makes the tool binary, on the router that took the
// registrations and on another that reads the beats from P_workers; once
// it leaves the tool is compact; compact_exec without binary_exec counts
// as neither.
func TestExecFormMixedFleet(t *testing.T) {
	st := newStore(t)
	r := start(t, st, registry.Config{})
	other := start(t, st, registry.Config{})
	reg := func(worker string, binary, compact bool, tool string) {
		t.Helper()
		ack, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: worker, Tools: []bus.ToolDef{def(tool)},
			BinaryExec: binary, CompactExec: compact, InFlight: map[string][]string{}})
		if err != nil {
			t.Fatal(err)
		}
		accepted(t, ack, tool)
	}
	wantForm := func(tool string, workers int, want bus.ExecForm) {
		t.Helper()
		if got := r.ExecForm(tool); got != want {
			t.Fatalf("%s: form %d on the registering router, want %d", tool, got, want)
		}
		testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
			if n, got := len(other.Workers()[tool]), other.ExecForm(tool); n != workers || got != want {
				return fmt.Errorf("%s: %d workers, form %d on the other router, want %d, %d", tool, n, got, workers, want)
			}
			return nil
		})
	}
	reg("old", true, false, "t")
	reg("new", true, true, "t")
	reg("odd", false, true, "u")
	wantForm("t", 2, bus.ExecBinary)
	wantForm("u", 1, bus.ExecStructured)
	if e, err := st.Workers.Get(t.Context(), "t.new"); err != nil || string(e.Value()) != `{"inflight":[],"binary":true,"compact":true}` {
		t.Fatalf("t.new: %v", err)
	}
	if e, err := st.Workers.Get(t.Context(), "u.odd"); err != nil || string(e.Value()) != `{"inflight":[]}` {
		t.Fatalf("u.odd: %v", err)
	}
	if _, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: "old", Leaving: true}); err != nil {
		t.Fatal(err)
	}
	wantForm("t", 1, bus.ExecCompact)
	reg("old", true, false, "t") // back: binary again at once
	wantForm("t", 2, bus.ExecBinary)
}
