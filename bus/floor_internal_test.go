package bus

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzDefinitionFloor: definitionFloor never exceeds the length of the
// encoding of what DecodeToolDef decodes (so nothing accepted before is
// refused), and names the member the decoding takes as the name; the seeds
// hold what a cheap reader gets wrong: a member given twice (the last
// counts), names matched case folded (ſ is s, K is K) or escaped whole
// (the longest, output_schema, too), escapes, white space,
// and raw schemas.
func FuzzDefinitionFloor(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","description":"` + strings.Repeat("d", 1000) + `","description":"x","input_schema":{}}`,
		`{"name":"a","description":"` + strings.Repeat("d", 1000) + `","DESCRIPTION":"x","input_schema":{}}`,
		`{"name":"a","description":"` + strings.Repeat("d", 1000) + `","deſcription":"x","input_schema":{}}`,
		`{"name":"a","description":"` + strings.Repeat("d", 1000) + `","de\u017fcription":"x","input_schema":{}}`,
		`{"name":"a","description":"` + strings.Repeat(`\u0064`, 300) + `","input_schema":{}}`,
		`{"name":"a","description":"` + strings.Repeat(`\\`, 300) + `\"","input_schema":{}}`,
		`{ "name" : "a" , "description" : "x" , "input_schema" : { "type" : "object" , "properties" : { "x" : { "description" : "` + strings.Repeat("s", 600) + `" } } } }`,
		`{"name":"a","description":"","groups":["` + strings.Repeat("g", 64) + `","b"],"input_schema":{"a":[1,2.5e3,true,null]},"output_schema":null}`,
		`{"name":"a","description":"","input_schema":{},"mcp":{"server":"` + strings.Repeat("m", 600) + `","tool":"t"}}`,
		`{"name":"a","description":"` + strings.Repeat("é", 200) + `\u2028<>&","input_schema":{}}`,
		`{"Name":"b","nAme":"c","description":"","input_schema":{}}`,
		`{"name":"a","description":"","input_schema":{},"output_schema":{"x":"` + strings.Repeat("o", 600) + `"},"\u006f\u0075\u0074\u0070\u0075\u0074\u005f\u0073\u0063\u0068\u0065\u006d\u0061":{}}`,
		`{"name":5,"description":"","input_schema":{}}`,
		`[1]`, `"x"`, `{}`, `{"name":"a",}`, `{"name":"a"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		floor, name := definitionFloor([]byte(raw))
		if floor < 0 {
			t.Fatalf("floor %d", floor)
		}
		var n struct {
			Name any `json:"name"`
		}
		if json.Unmarshal([]byte(raw), &n) == nil {
			got := nameOf(name, 7)
			want := "tools[7]"
			if s, ok := n.Name.(string); ok && s != "" {
				want = s
			}
			if got != want {
				t.Fatalf("name %q, want %q", got, want)
			}
		}
		d, err := DecodeToolDef([]byte(raw))
		if err != nil {
			return
		}
		b, err := json.Marshal(&d)
		if err != nil {
			return
		}
		if floor > len(b) {
			t.Fatalf("floor %d past the encoding's %d bytes: %s", floor, len(b), b)
		}
	})
}

// TestDefinitionFloorTight: a definition of large strings, plain or
// escaped, is found about as large as it is: plain text all of it, escapes
// a byte each (the floor counts every byte, but five for a backslash).
func TestDefinitionFloorTight(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want int
	}{
		{`{"name":"big","description":"` + strings.Repeat("d", 600_000) + `","input_schema":{}}`, 600_003},
		{`{"name":"big","description":"` + strings.Repeat(`\u0064`, 600_000) + `","input_schema":{}}`, 600_003},
		{`{"name":"big","groups":["` + strings.Repeat("g", 6000) + `"],"input_schema":{}}`, 6003},
	} {
		if floor, name := definitionFloor([]byte(c.raw)); floor != c.want || string(name) != `"big"` {
			t.Errorf("floor %d, name %s; want %d", floor, name, c.want)
		}
	}
}
