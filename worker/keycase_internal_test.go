package worker

import (
	"encoding/json"
	"reflect"
	"testing"
)

type caseInner struct {
	Path string `json:"path"`
}

type caseEmbedded struct {
	Level int `json:"level"`
}

type caseRaw struct{ seen string }

func (r *caseRaw) UnmarshalJSON(b []byte) error { r.seen = string(b); return nil }

type caseIn struct {
	caseEmbedded
	Mode    string               `json:"mode"`
	Plain   string               // matched by its Go name
	Skip    string               `json:"-"`
	Inner   caseInner            `json:"inner"`
	Items   []caseInner          `json:"items"`
	ByName  map[string]caseInner `json:"by_name"`
	Ptr     *caseInner           `json:"ptr,omitempty"`
	Raw     caseRaw              `json:"raw"`
	private string
}

func TestFoldedKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"mode":"safe"}`, ""},
		{`{"mode":"safe","MODE":"rm"}`, "MODE"},
		{`{"Mode":"rm"}`, "Mode"},
		{`{"mOdE":"rm"}`, "mOdE"},
		{"{\"\u212aey\":1}", ""}, // folds to no field
		{`{"plain":"x"}`, "plain"},
		{`{"Plain":"x"}`, ""},
		{`{"skip":"x","Skip":"y","-":"z"}`, ""}, // no field takes them
		{`{"LEVEL":3}`, "LEVEL"},                // an embedded struct's field, promoted
		{`{"level":3}`, ""},
		{`{"inner":{"PATH":"secret"}}`, "PATH"},
		{`{"items":[{"path":"a"},{"Path":"secret"}]}`, "Path"},
		{`{"by_name":{"k":{"pAth":"secret"}}}`, "pAth"},
		{`{"ptr":{"PATH":"secret"}}`, "PATH"},
		{`{"raw":{"ANY":"thing"}}`, ""}, // a type that reads its own keys
		{`{"private":"x","Private":"y"}`, ""},
		{`{"other":1,"Other":2}`, ""}, // keys no field has are the schema's business
		{`{"inner":"not an object"}`, ""},
		{`[1,2]`, ""},
		{`not json`, ""},
	} {
		if got := foldedKey(reflect.TypeFor[caseIn](), json.RawMessage(tc.in)); got != tc.want {
			t.Errorf("%s: foldedKey = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := foldedKey(reflect.TypeFor[map[string]string](), json.RawMessage(`{"A":"b"}`)); got != "" {
		t.Errorf("a map input: %q", got)
	}
}
