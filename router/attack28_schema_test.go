package router_test

import (
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
)

// TestAttackRegexProgramSize (session 28, red team): Go's regexp program
// grows with repetition counts (a{1000} is a thousand instructions) up to
// about three million instructions before "expression too large", which
// the schema limits (64 KiB, 1000 subschemas, 250 checks per value) did not
// see. Any agent may send a schema as a request-scoped tool, a new one per
// batch (the compile cache is keyed by the schema's digest): a 21 KB
// pattern of a{1000} × 3000 in a tools query cost the router 2.8-4.3 s and
// 1.4 GB allocated each time, and a worker or a bridged MCP server could
// register one. The patterns' estimated program and Unicode classes are
// bounded per schema before anything compiles: bad_request, at once.
func TestAttackRegexProgramSize(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1})
	c := newClient(t, d)
	for i := range 2 { // a new schema each time: one byte differs
		schema, _ := json.Marshal(map[string]any{"type": "object", "properties": map[string]any{
			"x": map[string]any{"type": "string", "pattern": strings.Repeat("a{1000}", 3000) + strings.Repeat("b", i)}}})
		req := &bus.Request{ExternalTools: []bus.ExternalTool{{Name: "pick", Description: "x", InputSchema: schema}}}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		_, err := c.Tools(t.Context(), "s1", bus.FormatOpenAI, req)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, "patterns are too costly") {
			t.Fatalf("schema %d: %v, want bad_request", i, err)
		}
		if grew := (after.TotalAlloc - before.TotalAlloc) >> 20; took > 2*time.Second || grew > 64 {
			t.Errorf("refusing a request-scoped schema of %d bytes cost the router %v and %d MiB", len(schema), took, grew)
		}
	}
}
