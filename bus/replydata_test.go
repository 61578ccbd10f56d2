package bus

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"
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

// replyViewAgrees checks that DecodeReplyView reads m as headView
// and then FromEvent do: the same event, reply and errors; it never takes
// the data of another type, or of an event the plain form does not hold.
func replyViewAgrees(t *testing.T, m *nats.Msg) {
	t.Helper()
	var we, ge Event
	var want Reply
	werr := headView(m, &we)
	if werr == nil && we.Type == TypeCallReply {
		werr = want.FromEvent(&we)
	}
	got, gerr := DecodeReplyView(m, &ge, true)
	if got != nil && (gerr != nil || ge.Type != TypeCallReply) {
		t.Fatalf("%q: read the data of %q (error %v)", m.Data, ge.Type, gerr)
	}
	if got == nil {
		got = new(Reply)
		if gerr == nil && ge.Type == TypeCallReply {
			gerr = got.FromEvent(&ge)
		}
	}
	if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
		t.Fatalf("%q: error %v, headView and FromEvent's %v", m.Data, gerr, werr)
	}
	if !reflect.DeepEqual(ge, we) || werr == nil && !reflect.DeepEqual(*got, want) {
		t.Fatalf("%q:\n got %+v %#v\nwant %+v %#v", m.Data, ge, *got, we, want)
	}
}

// replyEnvelopes are events around data d: a reply, an error, one whose
// data is followed by a member the plain form refuses, one with data twice.
func replyEnvelopes(d string) []string {
	head := `{"specversion":"1.0","id":"r1","source":"toolbus/router/r1","type":"%s","time":"2026-12-06T02:44:18.434Z","sessionid":"s1","replyid":"M3Cg","data":` + d
	return []string{
		fmt.Sprintf(head, TypeCallReply) + `}`,
		fmt.Sprintf(head, TypeError) + `}`,
		fmt.Sprintf(head, TypeCallReply) + `,"other":"x"}`,
		fmt.Sprintf(head, TypeCallReply) + `,"data":{}}`,
		fmt.Sprintf(head, TypeCallReply) + `,"sessionid":"s.1"}`,
	}
}

func TestDecodeReplyViewIsHeadAndFromEvent(t *testing.T) {
	plain := 0
	for _, d := range replySeeds {
		for _, env := range replyEnvelopes(d) {
			m := &nats.Msg{Data: []byte(env)}
			replyViewAgrees(t, m)
			var e Event
			if r, _ := DecodeReplyView(m, &e, true); r != nil {
				plain++
			}
		}
	}
	if plain < 4 { // the plain replies of replySeeds, in the plain reply envelope
		t.Errorf("DecodeReplyView read %d replies in the same pass, want at least 4", plain)
	}
	// Binary mode, and no reply to fill: what headView reads.
	bin := &nats.Msg{Header: nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"r1"}, "ce-source": {"s"}, "ce-type": {TypeCallReply}},
		Data: []byte(replySeeds[0])}
	replyViewAgrees(t, bin)
	var e Event
	if r, err := DecodeReplyView(&nats.Msg{Data: []byte(replyEnvelopes(replySeeds[0])[0])}, &e, false); r != nil || err != nil || e.Type != TypeCallReply {
		t.Errorf("not wanted: read %+v, %v, %+v", r, err, e)
	}
	// The usual reply, one result of one block: two allocations, the
	// reply with its result and block, and their strings.
	m := &nats.Msg{Data: []byte(replyEnvelopes(replySeeds[0])[0])}
	if n := testing.AllocsPerRun(100, func() { _, _ = DecodeReplyView(m, &e, true) }); n != 2 && !raceEnabled {
		t.Errorf("DecodeReplyView: %v allocations, want 2", n)
	}
}

func FuzzDecodeReplyView(f *testing.F) {
	for _, d := range replySeeds {
		for _, env := range replyEnvelopes(d) {
			f.Add([]byte(env))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) { replyViewAgrees(t, &nats.Msg{Data: b}) })
}
