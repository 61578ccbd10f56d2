package bus

import (
	"bytes"
	"reflect"
	"testing"
)

var execSeeds = []string{
	`{"call":{"id":"toolu_01","name":"get_weather","input":{"city":"Oslo"}},"user":"alice","context":{"tenant":"acme"},"attempt":1}`,
	`{"call":{"id":"c1","name":"echo","input":{"text":"x\"y"}},"user":null,"context":null,"attempt":2,"state":{}}`,
	` { "call" : { "id" : "c1" , "name" : "echo" , "input" : [1,{"a":"}"}] } , "user" : 7 , "attempt" : 12 } `,
	`{"call":{"id":"c1","name":"echo","input":"{\"env\": \"prod\"}"},"user":"u","context":{},"attempt":1}`,
	`{"call":{"id":"c1","name":"echo","input":null},"user":true,"context":false,"attempt":0,"state":null}`,
	`{"call":{"id":"c1","name":"echo"},"attempt":1,"attempt":2}`,
	`{"call":{"id":"c1","id":"c2","name":"echo"}}`,
	`{"Call":{"ID":"c1","name":"echo"},"attempt":1}`,
	`{"call":{"id":"c\u0031","name":"echo"}}`,
	`{"call":{"id":"ü","name":"echo"}}`,
	`{"call":{"id":1,"name":"echo"}}`,
	`{"call":{"id":"c1","name":"echo","background":true}}`,
	`{"call":{"id":"c1","name":"echo"},"attempt":1.0}`,
	`{"call":{"id":"c1","name":"echo"},"attempt":-1}`,
	`{"call":{"id":"c1","name":"echo"},"attempt":"1"}`,
	`{"call":{"id":"c1","name":"echo"},"attempt":01}`,
	`{"call":{"id":"c1","name":"echo"},"attempt":1e3}`,
	`{"call":{"id":"c1","name":"echo"},"attempt":null}`,
	`{"call":{"id":"c1","name":"echo"},"user":nul}`,
	`{"call":{"id":"c1","name":"echo"},"user":{"a":}}`,
	`{"call":{"id":"c1","name":"echo"}}x`,
	`{"call":{"id":"c1","name":"echo"},}`,
	`{"call":null}`, `{"call":[]}`, `{}`, `{ }`, `{`, `[]`, `null`, ``, `"x"`,
	`{"extra":1,"call":{"id":"c1","name":"echo"}}`,
	`{"call":{"id":"c1","name":"echo"}, "user":"a" "context":1}`,
	`{"call":{"id":"c1","name":"echo","input":{}}}   `,
	`{"call":{"id":"c1","name":"echo"},"attempt":1,"progress_reply":true}`,
	`{"call":{"id":"c1","name":"echo"},"progress_reply":false,"state":{}}`,
	`{"call":{"id":"c1","name":"echo"},"progress_reply":null}`,
	`{"call":{"id":"c1","name":"echo"},"progress_reply":"true"}`,
	`{"call":{"id":"c1","name":"echo"},"progress_reply":true,"progress_reply":false}`,
	`{"call":{"id":"c1","name":"echo"},"progress_reply":tru}`,
	`{"call":{"id":"c1","name":"echo"},"attempt":1,"progress_inbox":"_INBOX.router.x.y"}`,
	`{"call":{"id":"c1","name":"echo"},"progress_inbox":"a\u0041"}`,
	`{"call":{"id":"c1","name":"echo"},"progress_inbox":7}`,
}

// execDataAgrees checks that ExecData decodes b exactly as DataAs does.
func execDataAgrees(t *testing.T, b []byte) {
	t.Helper()
	var want, got ExecRequest
	e := &Event{Type: TypeExec, Data: b}
	werr := e.DataAs(&want)
	gerr := got.FromEvent(e, "c1", "echo")
	if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
		t.Fatalf("%s: error %v, DataAs's %v", b, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual(normal(got), normal(want)) {
		t.Fatalf("%s:\n got %+v\nwant %+v", b, got, want)
	}
}

// normal maps empty raw members to nil: DeepEqual tells them apart, and
// neither decoder promises one or the other for an absent member.
func normal(r ExecRequest) ExecRequest {
	for _, raw := range []*[]byte{(*[]byte)(&r.Call.Input), (*[]byte)(&r.User), (*[]byte)(&r.Context), (*[]byte)(&r.State)} {
		if len(*raw) == 0 {
			*raw = nil
		}
	}
	return r
}

func TestExecDataIsDataAs(t *testing.T) {
	for _, s := range execSeeds {
		execDataAgrees(t, []byte(s))
	}
}

// TestExecDataFlat: the router's form is read by the flat scan, without
// copying, and with the known strings.
func TestExecDataFlat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		flat bool
	}{
		{execSeeds[0], true},
		{execSeeds[1], true},
		{execSeeds[2], true},
		{`{"call":{"id":"c\u0031","name":"echo"}}`, false},
		{`{"call":{"id":"c1","name":"echo","background":true}}`, false},
		{`{"call":{"id":"c1","name":"echo"},"attempt":1,"attempt":2}`, false},
		{`{"call":{"id":"c1","name":"echo"},"attempt":-1}`, false},
	} {
		var r ExecRequest
		b := []byte(tc.in)
		if got := execFlat(b, &r, nil); got != tc.flat {
			t.Errorf("%s: flat %v, want %v", tc.in, got, tc.flat)
		}
	}
	b := []byte(`{"call":{"id":"c1","name":"echo","input":{"a":1}},"user":null,"context":{},"attempt":3}`)
	e := &Event{Data: b}
	var r ExecRequest
	id, name := "c1", "echo"
	if n := testing.AllocsPerRun(100, func() { _ = r.FromEvent(e, id, name) }); n != 0 && !raceEnabled {
		t.Errorf("%v allocations, want 0", n)
	}
	if r.Attempt != 3 || string(r.Call.Input) != `{"a":1}` || &r.Call.Input[0] != &b[bytes.Index(b, []byte(`{"a"`))] {
		t.Errorf("decoded %+v, not slices of the data", r)
	}
}

func FuzzExecData(f *testing.F) {
	for _, s := range execSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(execDataAgrees)
}
