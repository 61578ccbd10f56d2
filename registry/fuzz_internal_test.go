package registry

import (
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// FuzzParseTool: a P_tools value (written by any router, or by hand)
// never panics parseTool; one that parses encodes with encodeRecord to a
// value that parses to the same definition and registration order.
func FuzzParseTool(f *testing.F) {
	for _, s := range []string{
		`{"name":"get_weather","description":"Current weather.","input_schema":{"type":"object","properties":{"city":{"type":"string"}}},"read_only":true,"registered":1764583294452000000}`,
		`{"name":"x","input_schema":null}`, `{"name":"x"}`, `{"name":"x","input_schema":{"type":"string"}}`,
		`{"name":"x","input_schema":{"type":"object","properties":{"a":{"$ref":"#/$defs/b"}},"$defs":{"b":{}}},"registered":"x"}`,
		`{"name":"x","input_schema":{"type":"object"},"timeout_ms":-5,"registered":-1}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tool, err := parseTool(b)
		if err != nil {
			return
		}
		enc, err := encodeRecord(&tool.Def, tool.order)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseTool(enc)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", enc, err)
		}
		if !again.Def.Equal(&tool.Def) || again.order != tool.order {
			t.Fatalf("round trip differs: %s", enc)
		}
	})
}

func TestEncodeBeat(t *testing.T) {
	for _, tc := range []struct {
		v    bus.WorkerBeat
		want string
	}{
		{bus.WorkerBeat{}, `{}`},
		{bus.WorkerBeat{InFlight: []string{}}, `{"inflight":[]}`},
		{bus.WorkerBeat{InFlight: []string{"s.r.c"}, Binary: true}, `{"inflight":["s.r.c"],"binary":true}`},
		{bus.WorkerBeat{Binary: true}, `{"binary":true}`},
	} {
		if got := string(tc.v.Encode()); got != tc.want {
			t.Errorf("encodeBeat(%+v) = %s, want %s", tc.v, got, tc.want)
		}
	}
}
