package bridge

import (
	"context"
	"encoding/json"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// asked is a call parked for an answer, with its reply id and input.
type asked struct {
	replyID string
	call    bus.Parked
	input   bus.Question
}

// publish publishes a call of tool and returns its events and reply id.
func (e *env) publish(tool, id string) (*client.Events, string) {
	e.t.Helper()
	return e.publish2(tool, id, map[string]any{})
}

func (e *env) publish2(tool, id string, input any) (*client.Events, string) {
	e.t.Helper()
	ev, err := e.client.Watch(e.t.Context(), "s1")
	if err != nil {
		e.t.Fatal(err)
	}
	testkit.Stop(e.t, ev.Stop)
	reply, err := e.client.Publish("s1", bus.Batch{Calls: []bus.Call{{ID: id, Name: tool, Input: client.Input(input)}},
		User: json.RawMessage(`"alice"`), Events: bus.EventsCalls}) // follows results one by one (docs/protocol.md 3.4)
	if err != nil {
		e.t.Fatal(err)
	}
	return ev, reply
}

// nextParked waits for a call.parked event and returns the parked call.
func nextParked(t *testing.T, ev *client.Events) asked {
	t.Helper()
	timeout := time.After(2 * bound)
	for {
		select {
		case m := <-ev.C:
			if m.Type != bus.TypeCallParked {
				continue
			}
			var p bus.ParkedEvent
			if err := m.DataAs(&p); err != nil || len(p.Calls) != 1 {
				t.Fatalf("parked event: %v %+v", err, p)
			}
			a := asked{replyID: m.ReplyID, call: p.Calls[0]}
			if err := json.Unmarshal(p.Calls[0].Input, &a.input); err != nil {
				t.Fatalf("parked input: %v", err)
			}
			return a
		case <-timeout:
			t.Fatal("nothing parked")
		}
	}
}

// askedMany waits until maxQuestions questions of askmany (reply) parked
// and the server reported, as progress, that the other two were refused;
// it returns the parked ones.
func askedMany(t *testing.T, ev *client.Events, reply string) []asked {
	t.Helper()
	var waiting []asked
	refused := false
	timeout := time.After(2 * bound)
	for len(waiting) < maxQuestions || !refused {
		select {
		case m := <-ev.C:
			switch m.Type {
			case bus.TypeCallParked:
				var p bus.ParkedEvent
				if err := m.DataAs(&p); err != nil || len(p.Calls) != 1 {
					t.Fatalf("parked event: %v %+v", err, p)
				}
				a := asked{replyID: m.ReplyID, call: p.Calls[0]}
				if err := json.Unmarshal(p.Calls[0].Input, &a.input); err != nil {
					t.Fatalf("parked input: %v", err)
				}
				waiting = append(waiting, a)
			case bus.TypeCallProgress:
				var p bus.Progress
				if m.ReplyID == reply && m.DataAs(&p) == nil && len(p.Output) == 1 && p.Output[0].Text == "refused (2)" {
					refused = true
				}
			}
		case <-timeout:
			t.Fatalf("askmany: %d parked, refusals reported %v", len(waiting), refused)
		}
	}
	if len(waiting) > maxQuestions {
		t.Fatalf("%d questions parked at once", len(waiting))
	}
	return waiting
}

// resultOf waits for the result of call id.
func resultOf(t *testing.T, ev *client.Events, reply, id string) bus.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
	defer cancel()
	r, err := AwaitResult(ctx, ev, reply, id)
	if err != nil {
		t.Fatalf("no result for %s: %v", id, err)
	}
	return *r
}

func (e *env) answer(a asked, out bus.Answer) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), bound)
	defer cancel()
	if err := e.client.Parked().Answer(ctx, a.call.Name, "s1", a.replyID, a.call.ID, out); err != nil {
		e.t.Fatalf("answer: %v", err)
	}
}

// TestAsk: a bridged server's elicitations park on the bus as calls of
// mcp__<server>__elicit (kind external) in the asking call's session, and
// the answer goes back to the server: accepted content checked against the
// requested schema (a misfit is asked again), decline, URL mode; roots/list
// answers the configured roots; sampling is refused without a sampling
// tool and served by one.
func TestAsk(t *testing.T) {
	for _, tr := range []string{TransportStdio, TransportHTTP} {
		t.Run(tr, func(t *testing.T) {
			e := newEnv(t)
			llm, err := worker.New(testkit.Connect(t, e.srv), worker.Config{ID: "llm", Heartbeat: heartbeat})
			if err != nil {
				t.Fatal(err)
			}
			_ = llm.Handle(bus.ToolDef{Name: "llm", InputSchema: json.RawMessage(`{"type":"object"}`), ReadOnly: true},
				func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
					if !strings.Contains(string(c.Input), `"2+2?"`) || string(c.User) != `"alice"` {
						return &bus.ExecResult{State: bus.StateError, Output: bus.Text("unexpected input " + string(c.Input) + " user " + string(c.User))}, nil
					}
					return &bus.ExecResult{State: bus.StateSuccess, Output: bus.Text("4")}, nil
				})
			if err := llm.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = llm.Drain(context.Background()) })
			dir := t.TempDir()
			var s Server
			if tr == TransportStdio {
				s, _, _ = stdioServer(t, "t")
			} else {
				s = Server{Transport: tr, URL: startHTTP(t, false, newRecorder()).url()}
			}
			s.Name, s.EnableTools, s.Roots, s.SamplingTool = "t", []string{"ask", "askmany", "askurl", "roots", "sample"}, []string{dir, "file:///srv/b"}, "llm"
			other := s
			other.Name, other.Roots, other.SamplingTool = "o", nil, ""
			if s.Env != nil {
				other.Env = map[string]string{"BRIDGE_TEST_STDIO_SERVER": "1"}
			}
			e.bridge(&File{Servers: []Server{s, other}}, func(c *Config) { c.Roots = []string{"/work/dir"} })
			e.waitTools([]string{"mcp__t__ask", "mcp__t__askurl", "mcp__t__roots", "mcp__t__sample", "mcp__o__roots", "mcp__o__sample"}, nil)

			// A form elicitation: a misfit answer is asked again, then accepted.
			ev, reply := e.publish("mcp__t__ask", "a1")
			a := nextParked(t, ev)
			if a.call.Name != "mcp__t__elicit" || a.call.Kind != bus.KindExternal || a.input.Message != "Allow the deployment? Your name, please." ||
				a.input.Mode != "form" || len(a.input.Calls) != 1 || a.input.Calls[0] != "a1" || !strings.Contains(string(a.input.RequestedSchema), `"minLength":2`) {
				t.Fatalf("parked elicitation: %+v %+v", a.call, a.input)
			}
			// It is an external park: a confirmation cannot answer it.
			ctx, cancel := context.WithTimeout(t.Context(), bound)
			yes := true
			if err := e.client.Parked().Answer(ctx, a.call.Name, "s1", a.replyID, a.call.ID, bus.Answer{Confirmed: &yes}); err == nil {
				t.Fatal("a confirmation answered an elicitation")
			}
			cancel()
			e.answer(a, bus.Answer{State: bus.StateSuccess, Output: bus.Text(`{"name": "A"}`)})
			a = nextParked(t, ev)
			if !strings.Contains(a.input.Refused, "requested schema") {
				t.Fatalf("second round: %+v", a.input)
			}
			e.answer(a, bus.Answer{State: bus.StateSuccess, Output: bus.Text(`{"action": "accept", "content": {"name": "Ada"}}`)})
			if r := resultOf(t, ev, reply, "a1"); r.State != bus.StateSuccess || text(r) != `accept {"name":"Ada"}` {
				t.Fatalf("ask: %+v", r)
			}

			// An error answer declines.
			ev, reply = e.publish("mcp__t__ask", "a2")
			a = nextParked(t, ev)
			e.answer(a, bus.Answer{State: bus.StateError, Output: bus.Text("no")})
			if r := resultOf(t, ev, reply, "a2"); text(r) != "decline null" {
				t.Fatalf("declined: %+v", r)
			}

			// URL mode.
			ev, reply = e.publish("mcp__t__askurl", "u1")
			a = nextParked(t, ev)
			if a.input.Mode != "url" || a.input.URL != "https://example.com/auth" || a.input.ElicitationID != "e-1" {
				t.Fatalf("url elicitation: %+v", a.input)
			}
			e.answer(a, bus.Answer{State: bus.StateSuccess, Output: bus.Text("accept")})
			if r := resultOf(t, ev, reply, "u1"); text(r) != "accept" {
				t.Fatalf("url: %+v", r)
			}

			// Roots: the server's own, else the bridge's; nothing else.
			want := (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String() + ",file:///srv/b"
			if r := e.call("mcp__t__roots", map[string]any{}); text(r) != want {
				t.Fatalf("roots: %q, want %q", text(r), want)
			}
			if r := e.call("mcp__o__roots", map[string]any{}); text(r) != "file:///work/dir" {
				t.Fatalf("bridge roots: %+v", r)
			}

			// Sampling: refused without a sampling tool, else through it.
			if r := e.call("mcp__o__sample", map[string]any{}); !strings.Contains(text(r), "sampling is refused") {
				t.Fatalf("sampling without a tool: %+v", r)
			}
			ctx, cancel = context.WithTimeout(t.Context(), bound)
			defer cancel()
			rep, err := e.client.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "s1", Name: "mcp__t__sample", Input: client.Input(map[string]any{})}},
				User: json.RawMessage(`"alice"`), Events: bus.EventsCalls}) // follows results one by one (docs/protocol.md 3.4)
			if err != nil || len(rep.Results) != 1 || text(rep.Results[0]) != "llm: 4" {
				t.Fatalf("sampling: %+v %v", rep, err)
			}

			// At most maxQuestions wait at once; the rest are refused. The
			// ten questions reach the bridge at the server's pace: nothing
			// is answered before all ten did (eight parked, and the
			// server's progress says two were refused), else a late one
			// would take a freed place.
			ev, reply = e.publish("mcp__t__askmany", "m1")
			waiting := askedMany(t, ev, reply)
			if n := e.parkedCount(); n > maxQuestions {
				t.Fatalf("%d questions parked at once", n)
			}
			for _, q := range waiting {
				e.answer(q, bus.Answer{State: bus.StateSuccess, Output: bus.Text("decline")})
			}
			if r := resultOf(t, ev, reply, "m1"); text(r) != "refused 2" {
				t.Fatalf("askmany: %+v", r)
			}

			// The asking call cancelled: its question is withdrawn.
			ev, reply = e.publish("mcp__t__ask", "a3")
			a = nextParked(t, ev)
			cctx, cancel := context.WithTimeout(t.Context(), bound) // its own bound, not what the steps before left of one
			defer cancel()
			if err := e.client.Cancel(cctx, "s1", reply); err != nil {
				t.Fatal(err)
			}
			testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
				var out struct {
					Parked []bus.ParkedCall `json:"parked"`
				}
				actx, cancel := context.WithTimeout(t.Context(), bound)
				defer cancel()
				if err := e.client.Admin(actx, "parked.list", "s1", nil, &out); err != nil {
					return err
				}
				for _, p := range out.Parked {
					if p.ID == a.call.ID {
						return errNotYet
					}
				}
				return nil
			})
		})
	}
}

// parkedCount is the number of calls parked in session s1.
func (e *env) parkedCount() int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), bound)
	defer cancel()
	var out struct {
		Parked []bus.ParkedCall `json:"parked"`
	}
	if err := e.client.Admin(ctx, "parked.list", "s1", nil, &out); err != nil {
		e.t.Fatal(err)
	}
	return len(out.Parked)
}

// TestAskSSE: over SSE, whose mcp-go client cannot answer a server's
// requests, the bridge declares no capability, so a server's question
// fails at once instead of waiting for an answer that cannot come.
func TestAskSSE(t *testing.T) {
	e := newEnv(t)
	h := startHTTP(t, true, newRecorder())
	e.bridge(&File{Servers: []Server{{Name: "t", Transport: TransportSSE, URL: h.url(), EnableTools: []string{"ask", "roots"}}}})
	e.waitTools([]string{"mcp__t__ask", "mcp__t__roots"}, nil)
	if r := e.call("mcp__t__ask", map[string]any{}); r.State != bus.StateError || !strings.Contains(text(r), "elicitation failed") {
		t.Fatalf("ask over SSE: %+v", r)
	}
	if r := e.call("mcp__t__roots", map[string]any{}); r.State != bus.StateError {
		t.Fatalf("roots over SSE: %+v", r)
	}
}
