package schemas

import (
	"encoding/json"
	"reflect"
	"testing"
)

var decodeSeeds = []string{
	`{"q":"x"}`, `{}`, `[]`, `{"a":[1,-2.5e3,true,false,null,{"b":[]}],"c":"d"}`,
	` { "a" : "é" , "b":"x\"y\\u0041" } `, `{"a":1,"a":2}`, `{"n":0.0000000000000000000001,"m":123456789012345678901234567890}`,
	`{"s":"\ud83d\ude00","t":"\ud800"}`, "{\"bad\":\"\xff\"}", `"str"`, `12`, `{"deep":[[[[{"x":[{}]}]]]]}`,
}

func TestDecodeValidIsDecodeInput(t *testing.T) {
	for _, s := range decodeSeeds {
		checkDecode(t, []byte(s))
	}
	if _, ok := decodeValid([]byte(decodeSeeds[0])); !ok {
		t.Error("a plain input is not read by decodeValid")
	}
}

func FuzzDecodeValid(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecode(t, b) })
}

// checkDecode: on valid JSON within the depth bound (what ParseInput
// hands it), decodeValid makes what decodeInput makes, or declines.
func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	if !json.Valid(b) || jsonDepth(b, MaxInputDepth) > MaxInputDepth {
		return
	}
	got, ok := decodeValid(b)
	if !ok {
		return
	}
	want, err := decodeInput(b)
	if err != nil {
		t.Fatalf("decodeValid read %q, which decodeInput refuses: %v", b, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\ndecodeValid %#v\ndecodeInput %#v", b, got, want)
	}
}
