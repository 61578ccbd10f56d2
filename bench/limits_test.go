package bench

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/schemas"
)

// BenchmarkLimits reports the CPU of this process (the router, the server
// and the caller, all in process; the router's share dominates) per batch
// at the cost limits of docs/protocol.md 13:
//
//	go test -run '^$' -bench Limits -benchtime 20x ./bench/
func BenchmarkLimits(b *testing.B) {
	d, err := xtest.Start(b.Context(), xtest.Config{Routers: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	nc, err := d.Connect(b.Context(), xtest.RoleClient)
	if err != nil {
		b.Fatal(err)
	}
	c := client.New(nc, client.Config{Source: "bench/limits", Timeout: 5 * time.Minute})

	deepest := func(nonce int) json.RawMessage { // JSON depth MaxSchemaDepth
		s := `{"enum":[1],"description":"` + fmt.Sprint(nonce) + `"}`
		for range (schemas.MaxSchemaDepth-1)/2 - 1 {
			s = `{"type":"object","properties":{"a":` + s + `}}`
		}
		return json.RawMessage(`{"type":"object","properties":{"a":` + s + `}}`)
	}
	widest := func(nonce int) json.RawMessage { // MaxSubschemas, about 50 KiB
		var sb strings.Builder
		fmt.Fprintf(&sb, `{"type":"object","description":"%d","properties":{`, nonce)
		for i := range schemas.MaxSubschemas - 1 {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `"p%03d":{"type":"string","description":"Property %03d."}`, i, i)
		}
		sb.WriteString(`}}`)
		return json.RawMessage(sb.String())
	}
	recursive := json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"#"},"b":{"type":"string"}}}`)
	deepInput := json.RawMessage(strings.Repeat(`{"a":`, schemas.MaxInputDepth-1) + `{"b":1}` + strings.Repeat(`}`, schemas.MaxInputDepth-1))
	// Every member is checked against 243 subschemas, all failing: near
	// the most checks per value a schema may cost (250); three members are
	// the most within the input budget (912 of 1064).
	multiplied := json.RawMessage(`{"type":"object","additionalProperties":{"$ref":"#/$defs/x"},"$defs":{"x":{"allOf":[` + strings.Repeat(`{"type":"string"},`, 240) + `{}]}}}`)
	costly := json.RawMessage(`{"k1":1,"k2":1,"k3":1}`)
	attack := json.RawMessage(`{"type":"object","items":` + strings.Repeat(`{"items":`, 3200) + `{}` + strings.Repeat(`}`, 3201))

	tool := func(schema json.RawMessage) *bus.Request {
		return &bus.Request{ExternalTools: []bus.ExternalTool{{Name: "t", Description: "x", InputSchema: schema}}}
	}
	calls := func(n int, input json.RawMessage) []bus.Call {
		out := make([]bus.Call, n)
		for i := range out {
			out[i] = bus.Call{ID: fmt.Sprint("c", i), Name: "t", Input: input}
		}
		return out
	}
	missing := []bus.Call{{ID: "c1", Name: "missing"}}
	cases := []struct {
		name  string
		batch func(i int) bus.Batch
		code  string // the batch's error code, "" for a reply
	}{
		{"schema-max-depth/cold", func(i int) bus.Batch { return bus.Batch{Calls: missing, Request: tool(deepest(i))} }, ""},
		{"schema-max-depth/cached", func(int) bus.Batch { return bus.Batch{Calls: missing, Request: tool(deepest(-1))} }, ""},
		{"schema-max-subschemas/cold", func(i int) bus.Batch { return bus.Batch{Calls: missing, Request: tool(widest(i))} }, ""},
		{"schema-max-subschemas/cached", func(int) bus.Batch { return bus.Batch{Calls: missing, Request: tool(widest(-1))} }, ""},
		{"schema-attack-3200-levels", func(int) bus.Batch { return bus.Batch{Calls: missing, Request: tool(attack)} }, bus.CodeBadRequest},
		{"input-max-depth-invalid", func(int) bus.Batch { return bus.Batch{Calls: calls(1, deepInput), Request: tool(recursive)} }, ""},
		{"input-max-depth-invalid-x64", func(int) bus.Batch { return bus.Batch{Calls: calls(64, deepInput), Request: tool(recursive)} }, ""},
		{"input-at-check-budget", func(int) bus.Batch { return bus.Batch{Calls: calls(1, costly), Request: tool(multiplied)} }, ""},
		{"input-at-check-budget-x64", func(int) bus.Batch { return bus.Batch{Calls: calls(64, costly), Request: tool(multiplied)} }, ""},
		{"input-over-check-budget-x64", func(int) bus.Batch {
			return bus.Batch{Calls: calls(64, json.RawMessage(`{"k1":1,"k2":1,"k3":1,"k4":1}`)), Request: tool(multiplied)}
		}, ""},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			if _, err := c.Call(b.Context(), "limits", tc.batch(-2)); !wantCode(err, tc.code) { // warm up
				b.Fatal(err)
			}
			i := 0
			cpu := testkit.ProcessCPU()
			for b.Loop() {
				i++
				if _, err := c.Call(b.Context(), "limits", tc.batch(i)); !wantCode(err, tc.code) {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((testkit.ProcessCPU()-cpu).Microseconds())/1e3/float64(i), "cpu-ms/batch")
		})
	}
}

func wantCode(err error, code string) bool {
	if code == "" {
		return err == nil
	}
	be, ok := err.(*bus.Error)
	return ok && be.Code == code
}
