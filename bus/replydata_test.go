package bus

import (
	"reflect"
	"testing"
)

var replySeeds = []string{
	`{"results":[{"id":"c1","name":"echo","state":"success","output":[{"type":"text","text":"hi"}]}],"sessionrev":7}`,
	`{"results":[{"id":"c1","name":"echo","state":"success","output":[{"type":"text","text":"a\"b\\c\/d\n\t\r\b\f"}]},{"id":"c2","name":"x","state":"error","output":[]}],"parked":[]}`,
	` { "results" : [ { "output" : [ { "text" : "t" , "type" : "text" } ] , "state" : "interrupted" , "id" : "c" , "name" : "n" } ] , "sessionrev" : 0 , "parked" : null } `,
	`{"results":[],"parked":[],"sessionrev":18446744073709551615}`,
	`{"results":[{"id":"c1","name":"echo","state":"success","output":[{"type":"text","text":"\u00e9"}]}]}`,
	`{"results":[{"id":"c1","name":"echo","state":"success","output":[{"type":"text","text":"é"}]}]}`,
	`{"results":[{"id":"c\"1","name":"echo","state":"success","output":[]}]}`,
	`{"results":[{"id":"c1","name":"echo","state":"error","output":[{"type":"text","text":"x"}],"error":{"code":"tool_error","message":"x"}}]}`,
	`{"results":[{"id":"c1","name":"echo","state":"success","output":[{"type":"data","media_type":"image/png","data":"iVBO"}]}]}`,
	`{"results":[{"id":"c1","name":"echo","state":"success"}]}`,
	`{"results":[{"id":"c1","name":"echo","state":"success","output":null}]}`,
	`{"results":[{"id":"c1","id":"c2","name":"echo","state":"success","output":[]}]}`,
	`{"results":[{"ID":"c1","name":"echo","state":"success","output":[]}]}`,
	`{"results":null,"parked":[{"id":"c1","name":"ask","kind":"external","subject":"s"}]}`,
	`{"results":[],"sessionrev":-1}`, `{"results":[],"sessionrev":1.5}`, `{"results":[],"sessionrev":01}`,
	`{"results":[],"sessionrev":18446744073709551616}`, `{"results":[],"results":[]}`,
	`{"results":[{"id":"c1","name":"echo","state":"success","output":[{"type":"text","text":"x"}]}]}x`,
	`{"results":[{"id":"c1","name":"echo","state":"success","output":[{"type":"text","text":"x\q"}]}]}`,
	`{"results":[{"output":[{"type":"text","text":"x"},{"type":"text","text":""}]}],}`,
	`{}`, `{`, `[]`, `null`, ``, `{"results":[1]}`, `{"parked":[]}`,
}

// replyDataAgrees checks that ReplyData decodes b exactly as DataAs does.
func replyDataAgrees(t *testing.T, b []byte) {
	t.Helper()
	var want, got Reply
	e := &Event{Type: TypeCallReply, Data: b}
	werr := e.DataAs(&want)
	gerr := got.FromEvent(e)
	if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
		t.Fatalf("%s: error %v, DataAs's %v", b, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %#v\nwant %#v", b, got, want)
	}
}

func TestReplyDataIsDataAs(t *testing.T) {
	for _, s := range replySeeds {
		replyDataAgrees(t, []byte(s))
	}
}

// TestReplyDataFlat: the plain reply is read by the flat pass, in three
// allocations (strings, results, blocks), two for the usual one result of
// one block (its result and block in one).
func TestReplyDataFlat(t *testing.T) {
	for i, flat := range []bool{true, true, true, true, false, false, false, false, false} {
		var r Reply
		if got := replyFlat([]byte(replySeeds[i]), &r); got != flat {
			t.Errorf("%s: flat %v, want %v", replySeeds[i], got, flat)
		}
	}
	for _, c := range []struct {
		seed   int
		allocs float64
	}{{0, 2}, {1, 3}} {
		e := &Event{Data: []byte(replySeeds[c.seed])}
		var r Reply
		if n := testing.AllocsPerRun(100, func() { _ = r.FromEvent(e) }); n != c.allocs && !raceEnabled {
			t.Errorf("seed %d: %v allocations, want %v", c.seed, n, c.allocs)
		}
	}
}

func FuzzReplyData(f *testing.F) {
	for _, s := range replySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(replyDataAgrees)
}
