package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
)

// TestAskSubject (docs/protocol.md 12, 1.17): only a batch on P.ask.<s>
// parks a request-scoped mcp__<server>__elicit, and only such a park says
// "asked". On P.call a request-scoped tool of that name is bad_request; on
// P.ask anything but an external_only batch of those tools is; a refused
// batch parks nothing.
func TestAskSubject(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1})
	c := newClient(t, d)
	tool := func(name string) bus.ExternalTool {
		return bus.ExternalTool{Name: name, Description: "x", InputSchema: json.RawMessage(`{"type":"object"}`)}
	}
	only := func(names ...string) *bus.Request {
		r := &bus.Request{MergeMode: bus.MergeExternalOnly}
		for _, n := range names {
			r.ExternalTools = append(r.ExternalTools, tool(n))
		}
		return r
	}
	priority := only("mcp__x__elicit")
	priority.MergeMode = bus.MergeExternalPriority
	send := map[string]func(session string, b bus.Batch, replyID string) (*bus.Reply, error){
		"call": func(s string, b bus.Batch, r string) (*bus.Reply, error) {
			return c.Call(t.Context(), s, b, client.WithReplyID(r))
		},
		"ask": func(s string, b bus.Batch, r string) (*bus.Reply, error) {
			return c.Parked().Ask(t.Context(), s, b, client.WithReplyID(r))
		},
	}
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
			reply, err := send[tc.subject](session, b, replyID)
			if tc.refused != "" {
				var be *bus.Error
				if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, tc.refused) {
					t.Fatalf("%v, want bad_request saying %q", err, tc.refused)
				}
				var list struct {
					Parked []bus.ParkedCall `json:"parked"`
				}
				if err := c.Admin(t.Context(), "parked.list", session, nil, &list); err != nil || len(list.Parked) != 0 {
					t.Fatalf("refused, yet parked: %+v %v", list.Parked, err)
				}
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
