package router_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/schemas"
)

func newClient(t *testing.T, d *xtest.Deployment) *client.Client {
	t.Helper()
	return client.New(clientConn(t, d), client.Config{Source: "test/agent", Timeout: time.Minute})
}

// clientConn is a client's connection to d.
func clientConn(t *testing.T, d *xtest.Deployment) *nats.Conn {
	t.Helper()
	nc, err := d.Connect(t.Context(), xtest.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// clientJS is a client's connection to d and its JetStream context.
func clientJS(t *testing.T, d *xtest.Deployment) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc := clientConn(t, d)
	js := testkit.JetStream(t, nc)
	return nc, js
}

// TestRequestScopedCompiledOnce: a request-scoped tool re-sent in every
// batch is compiled once by the router (docs/protocol.md 4.3).
func TestRequestScopedCompiledOnce(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1})
	c := newClient(t, d)
	schema := json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"path":{"type":"string","description":"nonce %d"}},"required":["path"]}`, time.Now().UnixNano()))
	req := &bus.Request{ExternalTools: []bus.ExternalTool{{Name: "pick_file", Description: "Pick a file.", InputSchema: schema}}}
	_, misses0, _ := schemas.CacheStats()
	const batches = 1000
	for i := range batches {
		// The call goes to a missing tool: nothing parks, the batch ends.
		reply, err := c.Call(t.Context(), "once", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "missing"}}, Request: req})
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if len(reply.Results) != 1 || reply.Results[0].Error == nil || reply.Results[0].Error.Code != bus.CodeUnknownTool {
			t.Fatalf("batch %d: %+v", i, reply)
		}
	}
	hits, misses, held := schemas.CacheStats()
	t.Logf("compile cache after %d batches: %d hits, %d misses in all, %d held", batches, hits, misses, held)
	if n := misses - misses0; n != 1 {
		t.Fatalf("the router compiled %d schemas for %d batches of one request-scoped tool, want 1", n, batches)
	}
}

// TestDeepRequestScopedRefused: what the attack sent (a 3,200-level schema
// as a request-scoped tool, in queries and batches) is refused at once with
// the limit; an input past the depth limit is that call's invalid_input and
// the batch's other calls run; the router's memory stays put.
func TestDeepRequestScopedRefused(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1})
	c := newClient(t, d)
	deep := json.RawMessage(`{"type":"object","items":` + strings.Repeat(`{"items":`, 3200) + `{}` + strings.Repeat(`}`, 3201))
	req := &bus.Request{ExternalTools: []bus.ExternalTool{{Name: "deep", Description: "x", InputSchema: deep}}}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	want := fmt.Sprintf("external tool deep: schemas: schema nests deeper than %d levels of objects and arrays", schemas.MaxSchemaDepth)
	for i := range 3 {
		_, err := c.Tools(t.Context(), "deep", bus.FormatOpenAI, req)
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || be.Message != want {
			t.Fatalf("query %d: %v, want bad_request %q", i, err, want)
		}
	}
	_, err := c.Call(t.Context(), "deep", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "deep"}}, Request: req})
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || be.Message != want {
		t.Fatalf("batch: %v", err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Fatalf("refusing four deep schemas allocated %d MiB", grew>>20)
	}

	// A recursive request-scoped tool and an input past the depth limit.
	rec := json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"#"},"b":{"type":"string"}}}`)
	req = &bus.Request{ExternalTools: []bus.ExternalTool{{Name: "rec", Description: "x", InputSchema: rec}}}
	in := json.RawMessage(strings.Repeat(`{"a":`, schemas.MaxInputDepth) + `{}` + strings.Repeat(`}`, schemas.MaxInputDepth))
	reply, err := c.Call(t.Context(), "deep", bus.Batch{Request: req, Calls: []bus.Call{
		{ID: "c1", Name: "rec", Input: in},
		{ID: "c2", Name: "rec", Input: json.RawMessage(`{"a":{"b":"ok"}}`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Results) != 1 || reply.Results[0].ID != "c1" {
		t.Fatalf("results %+v, want c1's alone", reply.Results)
	}
	text := fmt.Sprintf("Input validation failed for tool 'rec':\n/: input nests deeper than %d levels of objects and arrays", schemas.MaxInputDepth)
	if r := reply.Results[0]; r.Error == nil || r.Error.Code != bus.CodeInvalidInput || r.Error.Message != text {
		t.Fatalf("c1: %+v, want invalid_input %q", r, text)
	}
	if len(reply.Parked) != 1 || reply.Parked[0].ID != "c2" {
		t.Fatalf("parked %+v, want c2 (the valid call goes on)", reply.Parked)
	}
}
