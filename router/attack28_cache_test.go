package router_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// cacheDeployment starts a router with the result cache on and a worker
// serving defs, each answering what it was given: "user=<user>
// input=<input decoded and encoded again>", so a result says whose call
// and which input it was computed for.
func cacheDeployment(t *testing.T, defs ...bus.ToolDef) (*client.Client, *atomic.Int64) {
	t.Helper()
	d := xtest.Run(t, xtest.Config{Routers: 1, Router: router.Config{Guard: router.Guard{Cache: true}}})
	var runs atomic.Int64
	_, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		for _, def := range defs {
			def.InputSchema = json.RawMessage(`{"type":"object"}`)
			if err := w.Handle(def, func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
				runs.Add(1)
				return &bus.ExecResult{State: bus.StateSuccess, Output: bus.Text("user=" + string(c.User) + " input=" + seen(c.Input))}, nil
			}); err != nil {
				return err
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, def := range defs {
		if err := d.WaitLive(t.Context(), def.Name); err != nil {
			t.Fatal(err)
		}
	}
	return newClient(t, d), &runs
}

// seen is an input as a Go tool reads it: decoded (the last of duplicate
// keys wins) and encoded again.
func seen(input json.RawMessage) string {
	var v any
	if err := json.Unmarshal(input, &v); err != nil {
		return "undecodable"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// cachedCall sends one call and returns its result's text and whether the
// cache answered it.
func cachedCall(t *testing.T, c *client.Client, session, user, tool, input string) (string, bool) {
	t.Helper()
	b := bus.Batch{Calls: []bus.Call{{ID: "c1", Name: tool, Input: json.RawMessage(input)}}}
	if user != "" {
		b.User = json.RawMessage(user)
	}
	reply, err := c.Call(t.Context(), session, b)
	if err != nil || len(reply.Results) != 1 {
		t.Fatalf("call %s %s: %+v %v", tool, input, reply, err)
	}
	r := reply.Results[0]
	if r.State != bus.StateSuccess {
		return r.State, false
	}
	return r.Output[0].Text, strings.Contains(string(r.Metadata), `"hit":true`)
}

// TestAttackCacheAcrossUsers (session 28, red team): in a session two users
// share (an open router behind the MCP facade, whose tokens may grant one
// session to alice and bob), bob calls a cached tool of the default scope,
// session, with alice's input. Before, the key held the session only, so
// bob was answered alice's result (her profile, her mail) computed with her
// user; now a call's user is in every key but a global one's.
func TestAttackCacheAcrossUsers(t *testing.T) {
	c, runs := cacheDeployment(t,
		bus.ToolDef{Name: "my_profile", Description: "The caller's profile.", ReadOnly: true, CacheTTLMS: 3600_000},
		bus.ToolDef{Name: "my_mail", Description: "The caller's mail.", ReadOnly: true, CacheTTLMS: 3600_000, CacheScope: "user"},
		bus.ToolDef{Name: "weather", Description: "Weather of a city.", ReadOnly: true, CacheTTLMS: 3600_000, CacheScope: "global"})
	for _, tool := range []string{"my_profile", "my_mail"} {
		if got, _ := cachedCall(t, c, "s1", `"alice"`, tool, `{}`); got != `user="alice" input={}` {
			t.Fatalf("%s as alice: %q", tool, got)
		}
		for _, user := range []string{`"bob"`, `{"id":"alice"}`, ``} {
			got, hit := cachedCall(t, c, "s1", user, tool, `{}`)
			if hit || got != "user="+user+" input={}" {
				t.Errorf("%s as %s in alice's session: %q (a hit: %v)", tool, user, got, hit)
			}
		}
		if _, hit := cachedCall(t, c, "s1", `"alice"`, tool, `{}`); !hit {
			t.Errorf("%s: alice's own repeat is not a hit", tool)
		}
	}
	// The session scope still keeps sessions apart, and a global tool is
	// shared by design.
	if got, hit := cachedCall(t, c, "s2", `"alice"`, "my_profile", `{}`); hit {
		t.Errorf("my_profile in another session: %q from the cache", got)
	}
	cachedCall(t, c, "s1", `"alice"`, "weather", `{"city":"Oslo"}`)
	if _, hit := cachedCall(t, c, "s2", `"bob"`, "weather", `{"city":"Oslo"}`); !hit {
		t.Error("a global tool is not shared")
	}
	if n := runs.Load(); n != 10 {
		t.Errorf("%d runs, want 10", n)
	}
}

// TestAttackCachePoisonedByInputForms (session 28, red team): with a
// global cached tool, an agent sends an input the tool reads as one value
// and the key might read as another (duplicate keys, escapes, number
// forms, case of keys, whitespace inside strings), hoping to store its
// result under the key of an input another user sends. The key digests the
// input's bytes (whitespace between tokens aside), so every other form is
// another key: each call's answer is the one computed for what it sent.
func TestAttackCachePoisonedByInputForms(t *testing.T) {
	c, _ := cacheDeployment(t, bus.ToolDef{Name: "lookup", Description: "Look a value up.", ReadOnly: true, CacheTTLMS: 3600_000, CacheScope: "global"})
	inputs := []string{
		`{"q":"Oslo","q":"Rome"}`, `{"q":"Oslo"}`, `{"q":"Rome"}`, `{"q":"Rome","q":"Oslo"}`,
		`{"q":"\u004fslo"}`, `{"q":"Oslo\u0000"}`, `{"q":"Oslo "}`, `{"q":" Oslo"}`, `{"q":"O slo"}`, `{ "q" : "O slo" }`,
		`{"q":1}`, `{"q":1.0}`, `{"q":1e0}`, `{"q":10}`, `{"q":-0}`, `{"q":0}`, `{"q":1e400}`,
		`{"Q":"Oslo"}`, `{"q":"Oslo","Q":"Rome"}`, `{"q":["Oslo"]}`, `{"q":{"q":"Oslo"}}`, `{"q":null}`, `{}`,
	}
	for round := range 2 { // the second round answers each from the cache
		for _, in := range inputs {
			got, hit := cachedCall(t, c, "s1", `"mallory"`, "lookup", in)
			if want := "user=\"mallory\" input=" + seen(json.RawMessage(in)); got != want {
				t.Errorf("round %d, %s: %q (a hit: %v), want %q", round, in, got, hit, want)
			}
			if round == 1 && !hit {
				t.Errorf("%s: not answered from the cache the second time", in)
			}
		}
	}
}

// TestAttackCacheAfterModeChange (session 28, red team): an idempotent
// (not read-only) tool's result is cached; the operator then puts the
// session in explore mode, where such a tool is denied. A repeat must be
// denied, not answered from the cache: the permission decision comes
// before the cache is looked at.
func TestAttackCacheAfterModeChange(t *testing.T) {
	c, runs := cacheDeployment(t, bus.ToolDef{Name: "sync_repo", Description: "Sync a repository.", Idempotent: true,
		Permission: bus.PermissionAllow, CacheTTLMS: 3600_000})
	if got, _ := cachedCall(t, c, "s1", "", "sync_repo", `{"repo":"r"}`); !strings.HasPrefix(got, "user=") {
		t.Fatalf("first call: %q", got)
	}
	if _, hit := cachedCall(t, c, "s1", "", "sync_repo", `{"repo":"r"}`); !hit {
		t.Fatal("the repeat is not a hit")
	}
	if err := c.Admin(t.Context(), "session.mode", "s1", map[string]string{"mode": "explore"}, nil); err != nil {
		t.Fatal(err)
	}
	if got, hit := cachedCall(t, c, "s1", "", "sync_repo", `{"repo":"r"}`); got != bus.StateDenied || hit {
		t.Errorf("in explore mode: %q (a hit: %v), want denied", got, hit)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}

// answerAndWait answers parked call c1 of reply r1 in session with a and
// waits for the batch's batch.done: the answer's run, and any cache write
// it would make, are over.
func answerAndWait(t *testing.T, c *client.Client, tool, session string, a bus.Answer) {
	t.Helper()
	ev, err := c.Watch(t.Context(), session)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ev.Stop(context.WithoutCancel(t.Context())) }()
	if err := c.Parked().Answer(t.Context(), tool, session, "r1", "c1", a); err != nil {
		t.Fatalf("answer: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		select {
		case e := <-ev.C:
			if e != nil && e.Type == bus.TypeBatchDone && e.ReplyID == "r1" {
				return
			}
		case <-ctx.Done():
			t.Fatal("no batch.done after the answer")
		}
	}
}

// TestAttackCachePoisonedThroughParks (session 28, red team): store a
// result no run of the registered tool computed for the input under the
// input's key of a global cached tool, so that every user is answered it.
//   - A request-scoped tool of the registered tool's name (it wins, 4.3)
//     parks for the caller, who answers it with its own text.
//   - A call that asks for confirmation is confirmed with an edited input
//     (P.answer, an open router): the tool runs with the edit.
//
// Neither is a run of the chain: an answer and a confirmed run are below
// the cache, which stores only what its own miss ran.
func TestAttackCachePoisonedThroughParks(t *testing.T) {
	c, runs := cacheDeployment(t,
		bus.ToolDef{Name: "weather", Description: "Weather of a city.", ReadOnly: true, CacheTTLMS: 3600_000, CacheScope: "global"},
		bus.ToolDef{Name: "sync_repo", Description: "Sync a repository.", Idempotent: true, Permission: bus.PermissionAsk,
			CacheTTLMS: 3600_000, CacheScope: "global"})
	shadow := bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "weather", Input: json.RawMessage(`{"city":"Oslo"}`)}},
		Request: &bus.Request{ExternalTools: []bus.ExternalTool{{Name: "weather", Description: "mine",
			InputSchema: json.RawMessage(`{"type":"object"}`)}}}}
	if r, err := c.Call(t.Context(), "m1", shadow, client.WithReplyID("r1")); err != nil || len(r.Parked) != 1 {
		t.Fatalf("shadowing call: %+v %v", r, err)
	}
	answerAndWait(t, c, "weather", "m1", bus.Answer{State: bus.StateSuccess, Output: bus.Text("poison")})

	ask := bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "sync_repo", Input: json.RawMessage(`{"repo":"a"}`)}}}
	if r, err := c.Call(t.Context(), "m2", ask, client.WithReplyID("r1")); err != nil || len(r.Parked) != 1 {
		t.Fatalf("asking call: %+v %v", r, err)
	}
	yes := true
	answerAndWait(t, c, "sync_repo", "m2", bus.Answer{Confirmed: &yes, Input: json.RawMessage(`{"repo":"evil"}`)})
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs before the victims' calls, want 1 (the edited confirmation)", n)
	}

	if got, hit := cachedCall(t, c, "v1", `"alice"`, "weather", `{"city":"Oslo"}`); hit || got != `user="alice" input={"city":"Oslo"}` {
		t.Errorf("alice's weather: %q (a hit: %v)", got, hit)
	}
	if err := c.Admin(t.Context(), "session.mode", "v2", map[string]string{"mode": "bypass"}, nil); err != nil {
		t.Fatal(err)
	}
	if got, hit := cachedCall(t, c, "v2", `"alice"`, "sync_repo", `{"repo":"a"}`); hit || got != `user="alice" input={"repo":"a"}` {
		t.Errorf("alice's sync of a: %q (a hit: %v)", got, hit)
	}
	if n := runs.Load(); n != 3 {
		t.Errorf("%d runs, want 3", n)
	}
}
