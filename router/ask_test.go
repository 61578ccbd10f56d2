package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/mcp/bridge"
	"github.com/toolbus/toolbus/worker"
)

// TestAskSubject (docs/protocol.md 12, 1.17): only a batch on P.ask.<s>
// parks a request-scoped mcp__<server>__elicit, and only such a park says
// "asked". On P.call a request-scoped tool of that name is bad_request; on
// P.ask anything but an external_only batch of those tools is; a refused
// batch parks nothing.
func TestAskSubject(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1})
	c := newClient(t, d)
	priority := only("mcp__x__elicit")
	priority.MergeMode = bus.MergeExternalPriority
	for _, tc := range []struct {
		name, subject string
		req           *bus.Request
		calls         []string
		refused       string // a word of the bad_request; "" when it parks
		asked         bool
	}{
		{"call: request-scoped elicit", "call", only("mcp__x__elicit"), []string{"mcp__x__elicit"}, "never in a call batch", false},
		{"call: elicit declared, another called", "call", only("mcp__x__elicit", "pick"), []string{"pick"}, "never in a call batch", false},
		{"call: elicit beside the registry", "call", priority, []string{"mcp__x__elicit"}, "never in a call batch", false},
		{"call: another request-scoped tool parks", "call", only("pick"), []string{"pick"}, "", false},
		{"ask: no request", "ask", nil, []string{"mcp__x__elicit"}, "external_only", false},
		{"ask: not external_only", "ask", priority, []string{"mcp__x__elicit"}, "external_only", false},
		{"ask: a non-elicit tool", "ask", only("pick"), []string{"pick"}, "not a bridged server's question tool", false},
		{"ask: a non-elicit tool declared beside", "ask", only("mcp__x__elicit", "pick"), []string{"mcp__x__elicit"}, "not a bridged server's question tool", false},
		{"ask: a call of no listed tool", "ask", only("mcp__x__elicit"), []string{"mcp__x__elicit", "echo"}, "calls only its request-scoped", false},
		{"ask: elicit parks asked", "ask", only("mcp__x__elicit"), []string{"mcp__x__elicit"}, "", true},
		{"ask: two servers' questions", "ask", only("mcp__x__elicit", "mcp__y__elicit"), []string{"mcp__x__elicit", "mcp__y__elicit"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session := "ask-" + strings.NewReplacer(" ", "-", ":", "", ",", "", "'", "").Replace(tc.name)
			ev, err := c.Watch(t.Context(), session)
			if err != nil {
				t.Fatal(err)
			}
			defer ev.Stop(t.Context())
			b := bus.Batch{Request: tc.req}
			for i, n := range tc.calls {
				b.Calls = append(b.Calls, bus.Call{ID: "c" + string(rune('1'+i)), Name: n, Input: json.RawMessage(`{}`)})
			}
			replyID := client.NewReplyID()
			if tc.subject == "ask" {
				replyID = client.NewAskID()
			}
			reply, err := sendOn(t, c, tc.subject, session, b, replyID)
			if tc.refused != "" {
				var be *bus.Error
				if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, tc.refused) {
					t.Fatalf("%v, want bad_request saying %q", err, tc.refused)
				}
				refusedParksNothing(t, c, session)
				return
			}
			if err != nil || len(reply.Parked) != len(tc.calls) {
				t.Fatalf("%+v %v, want %d parked", reply, err, len(tc.calls))
			}
			t.Cleanup(func() { _ = c.Cancel(context.Background(), session, replyID) })
			for _, p := range reply.Parked {
				if p.Asked != tc.asked || p.Kind != bus.KindExternal {
					t.Fatalf("the reply lists %+v, want external, asked %v", p, tc.asked)
				}
			}
			timeout := time.After(10 * time.Second)
			for {
				select {
				case e := <-ev.C:
					var pe bus.ParkedEvent
					if e.Type != bus.TypeCallParked || e.DataAs(&pe) != nil {
						continue
					}
					for _, p := range pe.Calls {
						if p.Asked != tc.asked {
							t.Fatalf("call.parked lists %+v, want asked %v", p, tc.asked)
						}
					}
					return
				case <-timeout:
					t.Fatal("no call.parked")
				}
			}
		})
	}
}

// only is an external_only request of request-scoped tools of names.
func only(names ...string) *bus.Request {
	r := &bus.Request{MergeMode: bus.MergeExternalOnly}
	for _, n := range names {
		r.ExternalTools = append(r.ExternalTools, bus.ExternalTool{Name: n, Description: "x", InputSchema: json.RawMessage(`{"type":"object"}`)})
	}
	return r
}

// sendOn sends b under replyID on P.call ("call") or P.ask ("ask").
func sendOn(t *testing.T, c *client.Client, subject, session string, b bus.Batch, replyID string) (*bus.Reply, error) {
	if subject == "ask" {
		return c.Parked().Ask(t.Context(), session, b, client.WithReplyID(replyID))
	}
	return c.Call(t.Context(), session, b, client.WithReplyID(replyID))
}

// refusedParksNothing fails t if anything is parked in session.
func refusedParksNothing(t *testing.T, c *client.Client, session string) {
	t.Helper()
	var list struct {
		Parked []bus.ParkedCall `json:"parked"`
	}
	if err := c.Admin(t.Context(), "parked.list", session, nil, &list); err != nil || len(list.Parked) != 0 {
		t.Fatalf("refused, yet parked: %+v %v", list.Parked, err)
	}
}

// TestAskReplyID (docs/protocol.md 3.1, 12; 1.18): a reply id starting
// with bus.AskPrefix is a bridge's question's. On P.call it is bad_request
// whatever the batch declares; on P.ask any other is; a refused batch
// parks nothing. The prefix is matched exactly: another case is an
// agent's id like any other. Then no batch on P.call is a copy of a
// question, whatever a router has seen of it: on two routers an agent's
// copy declaring another request-scoped tool, sent beside the bridge's
// question (before 1.18 only the park cache of the router it reached
// refused it, and it ran when that router had not seen the park yet), is
// refused every time, and the bridge reads the host's answer.
func TestAskReplyID(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 2})
	c := newClient(t, d)
	const name = "mcp__x__elicit"
	for _, tc := range []struct {
		name, subject, replyID string
		req                    *bus.Request
		call                   string
		refused                string // a word of the bad_request; "" when it parks
	}{
		{"call: a question's id, another request-scoped tool", "call", client.NewAskID(), only("pick"), "pick", "is a bridge's question's"},
		{"call: a question's id, the registry", "call", client.NewAskID(), nil, "echo", "is a bridge's question's"},
		{"call: a question's id, the question tool", "call", client.NewAskID(), only(name), name, "is a bridge's question's"},
		{"call: the prefix in another case", "call", strings.ToUpper(bus.AskPrefix) + client.NewReplyID(), only("pick"), "pick", ""},
		{"ask: a call batch's id", "ask", client.NewReplyID(), only(name), name, "starting with " + bus.AskPrefix},
		{"ask: the prefix in another case", "ask", strings.ToUpper(bus.AskPrefix) + client.NewReplyID(), only(name), name, "starting with " + bus.AskPrefix},
		{"ask: the prefix alone", "ask", bus.AskPrefix, only(name), name, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session := "askid-" + strings.NewReplacer(" ", "-", ":", "", ",", "", "'", "").Replace(tc.name)
			b := bus.Batch{Request: tc.req, Calls: []bus.Call{{ID: "c1", Name: tc.call, Input: json.RawMessage(`{}`)}}}
			reply, err := sendOn(t, c, tc.subject, session, b, tc.replyID)
			if tc.refused == "" {
				t.Cleanup(func() { _ = c.Cancel(context.Background(), session, tc.replyID) })
				if err != nil || len(reply.Parked) != 1 || reply.Parked[0].Asked != (tc.subject == "ask") {
					t.Fatalf("%+v %v, want parked, asked only on P.ask", reply, err)
				}
				return
			}
			var be *bus.Error
			if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, tc.refused) {
				t.Fatalf("%+v %v, want bad_request saying %q", reply, err, tc.refused)
			}
			refusedParksNothing(t, c, session)
		})
	}

	t.Run("a copy beside the question, two routers", func(t *testing.T) {
		const session = "askid-race"
		ev, err := c.Watch(t.Context(), session)
		if err != nil {
			t.Fatal(err)
		}
		defer ev.Stop(context.Background())
		for i := range 8 {
			replyID, callID := client.NewAskID(), "mcp-q"+strconv.Itoa(i)
			calls := []bus.Call{{ID: callID, Name: name, Input: json.RawMessage(`{"message":"delete it?"}`)}}
			var copyErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				_, copyErr = c.Call(t.Context(), session, bus.Batch{Request: only("pick"), Calls: calls}, client.WithReplyID(replyID))
			})
			reply, err := c.Parked().Ask(t.Context(), session, bus.Batch{Request: only(name), Calls: calls}, client.WithReplyID(replyID))
			wg.Wait()
			var be *bus.Error
			if !errors.As(copyErr, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, "is a bridge's question's") {
				t.Fatalf("round %d: the agent's copy: %v, want bad_request", i, copyErr)
			}
			if err != nil || len(reply.Parked) != 1 || !reply.Parked[0].Asked {
				t.Fatalf("round %d: the question: %+v %v, want parked, asked", i, reply, err)
			}
			answer := []bus.Block{{Type: "text", Text: `{"action":"decline"}`}}
			if err := c.Parked().Answer(t.Context(), name, session, replyID, callID, bus.Answer{State: bus.StateSuccess, Output: answer}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			res, err := bridge.AwaitResult(ctx, ev, replyID, callID)
			cancel()
			if err != nil || res.State != bus.StateSuccess || len(res.Output) != 1 || !strings.Contains(res.Output[0].Text, "decline") {
				t.Fatalf("round %d: the bridge reads %+v %v, want the host's answer", i, res, err)
			}
		}
	})
}

// TestAttackAskedResendOnCall (session 27, red team): the session's agent
// sees a bridge's question in the events (reply id, call id, input) and
// sends the same calls on P.call under the question's reply id, declaring
// nothing (or only the registry). Before the fix that copy ran the call as
// an unknown tool and published its error under the question's reply id:
// the bridge took it as the answer (cancel to the server, or a registered
// mcp__<server>__elicit tool's output as the user's answer) while the park
// stayed for the host. A copy on P.call of an asked batch is bad_request,
// and the bridge gets the host's answer. Two routers: a copy may meet the
// park on the router that did not park it (its record read from the store).
func TestAttackAskedResendOnCall(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 2})
	c := newClient(t, d)
	const name = "mcp__x__elicit"
	// A registered external tool of the question's name (a worker's, or a
	// bridged server's own tool "elicit"): a copy on P.call would park it.
	if _, err := d.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return w.Handle(bus.ToolDef{Name: name, Description: "registered", External: true, InputSchema: json.RawMessage(`{"type":"object"}`)}, nil)
	}}); err != nil {
		t.Fatal(err)
	}
	if err := d.WaitLive(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	session := "asked-resend"
	ev, err := c.Watch(t.Context(), session)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(context.Background())
	q := only(name)
	calls := []bus.Call{{ID: "mcp-q1", Name: name, Input: json.RawMessage(`{"message":"delete it?"}`)}}
	replyID := client.NewAskID()
	reply, err := c.Parked().Ask(t.Context(), session, bus.Batch{Request: q, Calls: calls}, client.WithReplyID(replyID))
	if err != nil || len(reply.Parked) != 1 || !reply.Parked[0].Asked {
		t.Fatalf("%+v %v, want the question parked, asked", reply, err)
	}
	for _, tc := range []struct {
		name string
		req  *bus.Request
	}{
		{"no request", nil},
		{"the registry first", &bus.Request{MergeMode: bus.MergeExternalPriority}},
		{"another request-scoped tool", only("pick")},
	} {
		_, err := c.Call(t.Context(), session, bus.Batch{Request: tc.req, Calls: calls}, client.WithReplyID(replyID))
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeBadRequest {
			t.Errorf("%s: a copy on P.call of the question: %v, want bad_request", tc.name, err)
		}
	}
	// The bridge's own re-send still parks it asked.
	reply, err = c.Parked().Ask(t.Context(), session, bus.Batch{Request: q, Calls: calls}, client.WithReplyID(replyID))
	if err != nil || len(reply.Parked) != 1 || !reply.Parked[0].Asked {
		t.Fatalf("the bridge's re-send: %+v %v, want the question parked, asked", reply, err)
	}
	answer := []bus.Block{{Type: "text", Text: `{"action":"decline"}`}}
	if err := c.Parked().Answer(t.Context(), name, session, replyID, "mcp-q1", bus.Answer{State: bus.StateSuccess, Output: answer}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := bridge.AwaitResult(ctx, ev, replyID, "mcp-q1")
	if err != nil || res.State != bus.StateSuccess || len(res.Output) != 1 || !strings.Contains(res.Output[0].Text, "decline") {
		t.Fatalf("the bridge reads %+v %v, want the host's answer", res, err)
	}

	// The other way: the registered tool's park (unasked) re-sent on P.ask
	// under its reply id is refused, and stays unasked.
	calls = []bus.Call{{ID: "agent-1", Name: name, Input: json.RawMessage(`{"message":"mine"}`)}}
	agents := client.NewReplyID()
	t.Cleanup(func() { _ = c.Cancel(context.Background(), session, agents) })
	reply, err = c.Call(t.Context(), session, bus.Batch{Calls: calls}, client.WithReplyID(agents))
	if err != nil || len(reply.Parked) != 1 || reply.Parked[0].Asked {
		t.Fatalf("the registered tool: %+v %v, want parked, not asked", reply, err)
	}
	_, err = c.Parked().Ask(t.Context(), session, bus.Batch{Request: q, Calls: calls}, client.WithReplyID(agents))
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeBadRequest {
		t.Fatalf("a copy on P.ask of an agent's batch: %v, want bad_request", err)
	}
}

// TestAttackAskHostile (session 27, red team): P.ask takes the limits of
// P.call: too many calls, an input over the limit, a duplicate call id or
// refused whole, and nothing parks. (A batch whose expirytime is past parks
// as on P.call: a park's end is its own TTL, docs/protocol.md 6.)
func TestAttackAskHostile(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1})
	c := newClient(t, d)
	const name = "mcp__x__elicit"
	q := only(name)
	many := make([]bus.Call, bus.MaxCalls+1)
	for i := range many {
		many[i] = bus.Call{ID: "q" + strconv.Itoa(i), Name: name, Input: json.RawMessage(`{}`)}
	}
	huge := json.RawMessage(`{"message":"` + strings.Repeat("a", 2<<20) + `"}`)
	one := func(id string, in json.RawMessage) bus.Call { return bus.Call{ID: id, Name: name, Input: in} }
	for _, tc := range []struct {
		name  string
		calls []bus.Call
	}{
		{"too many calls", many},
		{"a huge input", []bus.Call{one("q1", huge)}},
		{"a call id twice", []bus.Call{one("q1", json.RawMessage(`{}`)), one("q1", json.RawMessage(`{}`))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session := "ask-hostile-" + strings.ReplaceAll(tc.name, " ", "-")
			reply, err := c.Parked().Ask(t.Context(), session, bus.Batch{Request: q, Calls: tc.calls})
			var be *bus.Error
			if !errors.As(err, &be) || be.Code != bus.CodeBadRequest {
				t.Fatalf("%+v %v, want bad_request", reply, err)
			}
			refusedParksNothing(t, c, session)
		})
	}
}
