package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/mcp/mcptest"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/mcp/bridge"
)

// TestAnswerBridgedElicitation: a bridged MCP server's elicitation parks
// on the bus as a call of mcp__<server>__elicit (kind external), shows in
// `toolbus parked`, and `toolbus answer` (the command itself) answers it:
// the accepted content reaches the server, whose tool returns it.
func TestAnswerBridgedElicitation(t *testing.T) {
	d := newDeployment(t)
	askURL := mcptest.AskServer(t)
	b, err := bridge.New(d.conn(t), &bridge.File{Servers: []bridge.Server{{Name: "t", Transport: bridge.TransportHTTP, URL: askURL}}},
		bridge.Config{Heartbeat: testHeartbeat})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	d.waitListed(t, "mcp__t__ask")

	events := d.watchSession(t, "s1")
	reply, err := d.client.Publish("s1", bus.Batch{Calls: []bus.Call{{ID: "a1", Name: "mcp__t__ask", Input: client.Input(map[string]any{})}},
		User: json.RawMessage(`"alice"`)})
	if err != nil {
		t.Fatal(err)
	}
	var elicit bus.Parked
	timeout := time.After(10 * time.Second)
	for elicit.ID == "" {
		select {
		case e := <-events.C:
			var p bus.ParkedEvent
			if e.Type == bus.TypeCallParked && e.DataAs(&p) == nil && len(p.Calls) == 1 && p.Calls[0].Name == "mcp__t__elicit" {
				elicit = p.Calls[0]
			}
		case <-timeout:
			t.Fatal("the elicitation did not park")
		}
	}
	if !strings.Contains(string(elicit.Input), `"message":"Your name, please."`) || elicit.Kind != bus.KindExternal {
		t.Fatalf("parked elicitation: %+v", elicit)
	}
	out, _, err := exec(t.Context(), "parked", "--session", "s1", "--nats", d.url)
	if err != nil || !strings.Contains(strings.Join(strings.Fields(out), " "), elicit.ID+" mcp__t__elicit external") {
		t.Fatalf("toolbus parked: %v\n%s", err, out)
	}
	out, _, err = exec(t.Context(), "answer", elicit.ID, `{"action":"accept","content":{"name":"Ada"}}`, "--session", "s1", "--nats", d.url)
	if err != nil || !strings.HasPrefix(out, "answered call "+elicit.ID+" of mcp__t__elicit") {
		t.Fatalf("toolbus answer: %v %q", err, out)
	}
	res := waitDone(t, events, reply)
	if len(res) != 1 || res[0].State != bus.StateSuccess || len(res[0].Output) == 0 || res[0].Output[0].Text != `accept {"name":"Ada"}` {
		t.Fatalf("the asking call: %+v", res)
	}
}
