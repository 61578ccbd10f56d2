package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestJetStreamNames: buckets are named with the prefix as given, streams
// with it in upper case, capturing the subjects of docs/protocol.md 8.
func TestJetStreamNames(t *testing.T) {
	for _, prefix := range []string{"", "acme"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			var opts []option
			p := "toolbus"
			if prefix != "" {
				opts, p = append(opts, withPrefix(prefix)), prefix
			}
			s := start(t, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			ttl := map[string]time.Duration{}
			for _, b := range []string{"tools", "workers", "groups", "sessions", "parked", "ledger"} {
				kv, err := s.js.KeyValue(ctx, p+"_"+b)
				if err != nil {
					t.Errorf("bucket %s_%s: %v", p, b, err)
					continue
				}
				st, err := kv.Status(ctx)
				if err != nil {
					t.Fatal(err)
				}
				ttl[b] = st.TTL()
			}
			if ttl["workers"] != 3*heartbeat {
				t.Errorf("%s_workers TTL %v, want three heartbeats (%v)", p, ttl["workers"], 3*heartbeat)
			}
			if ttl["ledger"] != 10*time.Minute {
				t.Errorf("%s_ledger TTL %v, want the default dedupe window of 10 minutes", p, ttl["ledger"])
			}
			if ttl["sessions"] <= 0 {
				t.Errorf("%s_sessions has no idle TTL", p)
			}
			up := map[string]string{"toolbus": "TOOLBUS", "acme": "ACME"}[p]
			for name, subjects := range map[string][]string{
				up + "_EVENTS": {p + ".events.>"},
			} {
				st, err := s.js.Stream(ctx, name)
				if err != nil {
					t.Errorf("stream %s: %v", name, err)
					continue
				}
				got := slices.Clone(st.CachedInfo().Config.Subjects)
				slices.Sort(got)
				slices.Sort(subjects)
				if !slices.Equal(got, subjects) {
					t.Errorf("stream %s subjects %v, want %v", name, got, subjects)
				}
			}
		})
	}
}

// TestCustomPrefix: a deployment with prefix P serves the router subjects
// under P in queue group P-router, sends exec requests on P.exec.<tool> and
// publishes on P.events; nothing answers on the default prefix.
func TestCustomPrefix(t *testing.T) {
	s := start(t, withPrefix("acme"))
	s.serve(t, echo, def("ping"))
	ev := s.watch(t, "s1")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "ping"}))
	wantSuccess(t, r.Results[0], "ping ran")
	checkBatchEvents(t, ev.until(doneOf("r1")), "s1", "r1", "c1")
	if s.kvGet(t, "acme_tools", "ping") == nil {
		t.Error("no acme_tools entry for ping")
	}
	sz, err := s.srv.Subsz(&server.SubszOptions{Subscriptions: true, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	queues := map[string]string{}
	for _, d := range sz.Subs {
		queues[d.Subject] = d.Queue
	}
	for subj, q := range map[string]string{"acme.call.>": "acme-router", "acme.register": "acme-router", "acme.register.>": "acme-router",
		"acme.tools.>": "acme-router", "acme.answer.>": "acme-router", "acme.admin.>": "acme-router", "acme.cancel.>": ""} {
		if got, ok := queues[subj]; !ok || got != q {
			t.Errorf("subscription %s: queue %q (present %v), want %q", subj, got, ok, q)
		}
	}
	// Nothing answers on the default prefix (a short, bounded check: this
	// is the one place where silence is the expected outcome).
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := s.nc.RequestMsgWithContext(ctx, batch("s1", "r2", callsData(Call{ID: "c1", Name: "ping"})).msg(t, "toolbus.call.s1")); err == nil {
		t.Error("something answered on the default prefix")
	}
}

// TestKVKeys: the keys of docs/protocol.md 8, read as a foreign client.
func TestKVKeys(t *testing.T) {
	s := start(t)
	w := s.startWorker(t, []M{def("deploy"), def("look", M{"read_only": true}), def("handoff", M{"external": true}),
		def("gtool", M{"groups": []string{"g"}})}, []M{{"name": "g", "description": "G.", "scope": "meta"}}, echo)
	s.waitListed(t, "probe", "deploy", "look", "handoff")
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "deploy"}, Call{ID: "c2", Name: "look"},
		Call{ID: "c3", Name: "reset_tools", Input: M{"g": true}}, Call{ID: "c4", Name: "handoff"}))
	wantIDs(t, "reply", r.Results, "c1", "c2", "c3")
	for _, k := range []struct{ bucket, key string }{
		{"toolbus_tools", "deploy"}, {"toolbus_tools", "handoff"},
		{"toolbus_workers", "deploy." + w.id},
		{"toolbus_groups", "g"},
		{"toolbus_sessions", "s1"},
		{"toolbus_parked", "s1.r1.c4"},
		{"toolbus_ledger", "s1.r1.c1"},
	} {
		if s.kvGet(t, k.bucket, k.key) == nil {
			t.Errorf("%s has no key %s", k.bucket, k.key)
		}
	}
	if s.kvGet(t, "toolbus_ledger", "s1.r1.c2") != nil {
		t.Error("the ledger recorded a read-only call")
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	kv, err := s.js.KeyValue(ctx, "toolbus_workers")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "handoff."+w.id); err == nil {
		t.Error("an external tool has a liveness entry")
	}
}

// TestSessionWritesNotLost: session updates use compare-and-set; writes
// made at once through several routers are all kept (docs/protocol.md 8).
func TestSessionWritesNotLost(t *testing.T) {
	s := start(t)
	var groups []M
	var defs []M
	var want []string
	for i := range 6 {
		g := fmt.Sprintf("x%d", i)
		groups = append(groups, M{"name": g, "description": g, "scope": "external"})
		defs = append(defs, def("t"+g, M{"groups": []string{g}}))
		want = append(want, "t"+g)
	}
	s.startWorker(t, append(defs, def("anchor")), groups, echo)
	s.waitListed(t, "probe", "anchor")
	s.addRouter()
	s.addRouter()
	var ps []*pendingReply
	for i := range 6 {
		o := out{typ: tAdmin, data: M{"groups": []string{fmt.Sprintf("x%d", i)}, "active": true}, attrs: map[string]string{"sessionid": "s1"}}
		ps = append(ps, s.requestAsync(t, o.msg(t, "toolbus.admin.session.activate")))
	}
	for _, p := range ps {
		if e := p.wait(t); e.Type != tAdminReply {
			t.Fatalf("session.activate: %s %s", e.Type, e.Data)
		}
	}
	got := names(t, s.list(t, "s1", nil).Tools)
	for _, n := range want {
		if !slices.Contains(got, n) {
			t.Errorf("%s not listed: an activation was lost (listed %v)", n, got)
		}
	}
}

// TestConcurrentStatePatches: state patches of parallel calls are applied
// with compare-and-set; none is lost (docs/protocol.md 5.1).
func TestConcurrentStatePatches(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) {
		if c.Call.ID == "read" {
			c.text(string(c.State))
			return
		}
		c.result("success", []Block{{Type: "text", Text: "ok"}}, M{"state_patch": M{c.Call.ID: true}})
	}, def("st", M{"state_injected": true}))
	var calls []Call
	want := M{}
	for i := range 8 {
		id := fmt.Sprintf("k%d", i)
		calls = append(calls, Call{ID: id, Name: "st"})
		want[id] = true
	}
	s.call(t, "s1", "r1", M{"calls": calls})
	r := s.call(t, "s1", "r2", callsData(Call{ID: "read", Name: "st"}))
	if !jsonEqual(json.RawMessage(textOf(r.Results[0])), want) {
		t.Fatalf("state %s, want %s", textOf(r.Results[0]), jsonOf(want))
	}
}

// TestStatePatchOfToolNotStateInjected: state_patch is allowed only for
// state_injected tools (docs/protocol.md 5.1); another tool's patch is a tool
// error and changes no state.
func TestStatePatchOfToolNotStateInjected(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) {
		if c.Call.Name == "reader" {
			c.text(string(c.State))
			return
		}
		c.result("success", []Block{{Type: "text", Text: "ok"}}, M{"state_patch": M{"x": 1}})
	}, def("plain"), def("reader", M{"state_injected": true}))
	r := s.call(t, "s1", "r1", callsData(Call{ID: "c1", Name: "plain"}))
	wantFailure(t, r.Results[0], "error", "tool_error", "")
	r = s.call(t, "s1", "r2", callsData(Call{ID: "c1", Name: "reader"}))
	if got := textOf(r.Results[0]); got != "{}" {
		t.Fatalf("state after a refused patch: %s", got)
	}
}
