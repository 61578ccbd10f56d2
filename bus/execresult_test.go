package bus

import (
	"reflect"
	"testing"

	fastjson "github.com/goccy/go-json"
)

var execResultSeeds = []string{
	`{"state":"success","output":[{"type":"text","text":"hi"}]}`,
	`{"state":"success","output":[]}`,
	`{"state":"error","output":[{"type":"text","text":"Error: no"},{"type":"text","text":"more"}],"metadata":{"k":1}}`,
	`{ "state" : "interrupted" , "output" : [ { "text" : "x" , "type" : "text" } ] , "state_patch" : {"a":null} }`,
	`{"state":"odd","output":[{"type":"resource_link"}],"metadata":[1,2]}`,
	`{"state":"success","output":[{"type":"text","text":"a\nb"}]}`,
	`{"state":"success","output":null}`,
	`{"State":"success","output":[]}`,
	`{"state":"success","state":"error","output":[]}`,
	`{"state":"success","output":[{"type":"text","type":"image"}]}`,
	`{"state":"success","output":[{"type":"text","text":"ü"}]}`,
	`{"state":"success","output":[],"metadata":null}`,
	`{"state":"success","output":[{"type":"text","text":"hi"},]}`,
	`{"state":"success","output":[{"type":"text","text":"hi"}]} x`,
	`{}`,
	`{"state":"interrupted","output":[{"type":"text","text":"x"}],"cancel":"cancel-1"}`,
	`{"state":"interrupted","output":[],"cancel":"c\u0031"}`,
	`{"state":"interrupted","output":[],"cancel":7}`,
}

// The plain form's scanner agrees with the general decoder on everything
// it takes.
func FuzzExecResultFlat(f *testing.F) {
	for _, s := range execResultSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkExecResultFlat(t, b) })
}

func checkExecResultFlat(t *testing.T, b []byte) {
	t.Helper()
	checkScanner(t, b, decodeExecResultFlat)
}

// checkScanner fails when scan takes b and reads it otherwise than the
// general decoder.
func checkScanner[T any](t *testing.T, b []byte, scan func([]byte, *T) bool) {
	t.Helper()
	var flat T
	if !scan(b, &flat) {
		return
	}
	var general T
	if err := fastjson.Unmarshal(b, &general); err != nil {
		t.Fatalf("the scanner took %q, which the general decoder refuses: %v", b, err)
	}
	if !reflect.DeepEqual(flat, general) {
		t.Fatalf("%q:\nscanner %#v\ngeneral %#v", b, flat, general)
	}
}

// Which seeds the scanner takes: the plain forms, and nothing else.
func TestExecResultFlat(t *testing.T) {
	plain := map[string]bool{execResultSeeds[0]: true, execResultSeeds[1]: true, execResultSeeds[2]: true, execResultSeeds[3]: true, execResultSeeds[4]: true, execResultSeeds[15]: true}
	for _, s := range execResultSeeds {
		checkExecResultFlat(t, []byte(s))
		var xr ExecResult
		if got := decodeExecResultFlat([]byte(s), &xr); got != plain[s] {
			t.Errorf("%s: scanner took it %v, want %v", s, got, plain[s])
		}
		e := Event{Type: TypeExecResult, Data: []byte(s)}
		var general ExecResult
		errGeneral := e.DataAs(&general)
		xr = ExecResult{State: "left over", Output: []Block{{}}}
		if err := xr.FromEvent(&e); (err == nil) != (errGeneral == nil) || err == nil && !reflect.DeepEqual(xr, general) {
			t.Errorf("%s: ExecResultData %#v, %v; DataAs %#v, %v", s, xr, err, general, errGeneral)
		}
	}
	b := []byte(execResultSeeds[2])
	var xr ExecResult
	if n := testing.AllocsPerRun(100, func() { decodeExecResultFlat(b, &xr) }); n > 3 && !raceEnabled {
		t.Errorf("%.1f allocations for two blocks and metadata, want at most 3", n)
	}
}
