package security

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/router"
)

// TestAttackMetricsToolCardinality (session 31, red team on --metrics): a
// session agent declares request-scoped tools of names it makes up, 64 a
// batch, and calls each with an input its schema refuses (an immediate
// invalid_input, nothing parks). Every call is counted by tool, so each
// name was a new series of toolbus_router_calls_total and of the latency
// histogram (20 series a name): a loop of batches grew the router's memory
// and every scrape without end. Now request-scoped tools count under one
// label value, and the tool label takes at most metrics.MaxLabelValues
// values (the rest count under "other").
func TestAttackMetricsToolCardinality(t *testing.T) {
	const names = metrics.MaxLabelValues + 3*bus.MaxCalls
	reg := prometheus.NewRegistry()
	d := newDeployment(t, func(c *router.Config) { c.Metrics = reg })
	ac := d.conn("session-s1").client()
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	for i := 0; i < names; i += bus.MaxCalls {
		var b bus.Batch
		b.Request = &bus.Request{}
		for j := i; j < i+bus.MaxCalls && j < names; j++ {
			name := fmt.Sprintf("made_up_%05d", j)
			b.Request.ExternalTools = append(b.Request.ExternalTools, bus.ExternalTool{Name: name, Description: "x", InputSchema: schema})
			b.Calls = append(b.Calls, bus.Call{ID: fmt.Sprintf("c%d", j), Name: name, Input: json.RawMessage(`{}`)})
		}
		rep, err := ac.Call(testCtx(t), "s1", b)
		must(t, err)
		if len(rep.Results) != len(b.Calls) || rep.Results[0].Error == nil || rep.Results[0].Error.Code != bus.CodeInvalidInput {
			t.Fatalf("batch at %d: %d results, %d parked, first %+v", i, len(rep.Results), len(rep.Parked), rep.Results[0])
		}
	}
	tools, total := toolLabels(t, reg)
	if total != names {
		t.Fatalf("%d calls counted, want %d", total, names)
	}
	// Request-scoped tools count under one label (metrics.RequestTool): no
	// made-up name is a label value, nor takes the room of tools registered
	// later (the label's own bound, metrics.MaxLabelValues, is a last guard:
	// metrics TestLabelsBound).
	if len(tools) != 1 || tools[metrics.RequestTool] != names {
		t.Fatalf("tool label values %d after %d made-up names, want only %q: %v", len(tools), names, metrics.RequestTool, firstKeys(tools, 5))
	}
}

// firstKeys returns up to n keys of m, for a message.
func firstKeys(m map[string]float64, n int) []string {
	var out []string
	for k := range m {
		if len(out) == n {
			break
		}
		out = append(out, k)
	}
	return out
}

// toolLabels returns toolbus_router_calls_total's calls per tool label value
// and their sum.
func toolLabels(t *testing.T, reg *prometheus.Registry) (map[string]float64, int) {
	mfs, err := reg.Gather()
	must(t, err)
	tools, total := map[string]float64{}, 0
	for _, mf := range mfs {
		if mf.GetName() != "toolbus_router_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tool" {
					tools[l.GetValue()] += m.GetCounter().GetValue()
					total += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return tools, total
}
