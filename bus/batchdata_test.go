package bus

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/nats-io/nats.go"
)

var batchSeeds = []string{
	`{"calls":[{"id":"c1","name":"echo","input":{"text":"hi"}}]}`,
	`{"calls":[{"id":"c1","name":"echo","input":{"text":"hi"}},{"id":"c2","name":"get","input":{},"background":true}],"user":"alice","context":{"tenant":"acme"},"events":"calls","sessionrev":42}`,
	`{ "calls" : [ { "name" : "a" , "id" : "b" } ] , "user" : [1, 2] , "sessionrev" : 0 }`,
	`{"calls":[],"context":"x"}`,
	`{"calls":[{"id":"c1","name":"echo","input":{"text":"h\u00e9"}}],"user":{"a":"\n"}}`,
	`{"calls":[{"id":"c1","name":"echo","input":[1]}]}`,
	`{"calls":[{"id":"c1","name":"echo","background":false,"background":true}]}`,
	`{"calls":[{"id":"c1","name":"echo"}],"user":null}`,
	`{"calls":[{"id":"c1","name":"echo"}],"request":{"mode":"default"}}`,
	`{"calls":[{"id":"c1","name":"echo"}],"sessionrev":01}`,
	`{"calls":[{"id":"c1","name":"echo"}],"sessionrev":18446744073709551616}`,
	`{"calls":[{"id":"c1","name":"echo"}],"sessionrev":1.5}`,
	`{"calls":[{"id":"c1","name":"echo"}],"sessionrev":-1}`,
	`{"calls":[{"ID":"c1","name":"echo"}]}`,
	`{"calls":null}`,
	`{"user":"a"}`,
	`{"calls":[{"id":"c1","name":"echo"}]} x`,
	`{"calls":[{"id":"c1","name":"ü"}]}`,
}

// The plain form's scanner agrees with the general decoder on everything
// it takes.
func FuzzBatchFlat(f *testing.F) {
	for _, s := range batchSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkBatchFlat(t, b) })
}

func checkBatchFlat(t *testing.T, b []byte) {
	t.Helper()
	checkScanner(t, b, func(b []byte, d *Batch) bool { return decodeBatchFlat(b, d, nil) })
	var into [1]Call // into a caller's array: the same batch
	checkScanner(t, b, func(b []byte, d *Batch) bool { return decodeBatchFlat(b, d, into[:0]) })
}

// Which seeds the scanner takes (the plain forms, nothing else), and
// BatchData reads every seed as DataAs does.
func TestBatchFlat(t *testing.T) {
	plain := map[string]bool{batchSeeds[0]: true, batchSeeds[1]: true, batchSeeds[2]: true, batchSeeds[3]: true, batchSeeds[4]: true} // raw members keep their escapes, as goccy does
	for _, s := range batchSeeds {
		checkBatchFlat(t, []byte(s))
		var d Batch
		if got := decodeBatchFlat([]byte(s), &d, nil); got != plain[s] {
			t.Errorf("%s: scanner took it %v, want %v", s, got, plain[s])
		}
		e := Event{Type: TypeCallBatch, Data: []byte(s)}
		var general Batch
		errGeneral := e.DataAs(&general)
		d = Batch{Events: "left over", Calls: []Call{{}}}
		if err := d.FromEvent(&e); (err == nil) != (errGeneral == nil) || err == nil && !reflect.DeepEqual(d, general) {
			t.Errorf("%s: BatchData %#v, %v; DataAs %#v, %v", s, d, err, general, errGeneral)
		}
	}
	b := []byte(batchSeeds[1])
	var d Batch
	if n := testing.AllocsPerRun(100, func() { decodeBatchFlat(b, &d, nil) }); n > 2 && !raceEnabled {
		t.Errorf("%.1f allocations for two calls, user and context, want at most 2", n)
	}
	var into [2]Call // FromEventInto's: the calls in the caller's array
	if n := testing.AllocsPerRun(100, func() { decodeBatchFlat(b, &d, into[:0]) }); n > 1 && !raceEnabled {
		t.Errorf("%.1f allocations for two calls into an array, want at most 1", n)
	}
	if &d.Calls[0] != &into[0] {
		t.Error("the calls are not in the array given")
	}
}

// The strings and raw members share one buffer, each raw member capped:
// appending to one, or writing over it, changes neither another member
// nor a string.
func TestBatchFlatSharedBuffer(t *testing.T) {
	var d Batch
	if !decodeBatchFlat([]byte(batchSeeds[1]), &d, nil) {
		t.Fatal("the seed is plain")
	}
	want := Batch{Calls: append([]Call(nil), d.Calls...), User: append(json.RawMessage(nil), d.User...),
		Context: append(json.RawMessage(nil), d.Context...), Events: d.Events, SessionRev: d.SessionRev}
	for i := range want.Calls {
		want.Calls[i].Input = append(json.RawMessage(nil), d.Calls[i].Input...)
	}
	_ = append(d.Calls[0].Input, "xxxxxxxx"...)
	_ = append(d.User, "xxxxxxxx"...)
	for i := range d.Calls[1].Input {
		d.Calls[1].Input[i] = 'x'
	}
	want.Calls[1].Input = d.Calls[1].Input
	if !reflect.DeepEqual(d, want) {
		t.Errorf("after writes to members: %#v, want %#v", d, want)
	}
}

// batchReadAgrees checks that DecodeBatch reads m as DecodeHead and then
// FromEventInto do: the same event, batch and errors; it never takes the
// data of another type, or of an event the plain form does not hold.
func batchReadAgrees(t *testing.T, m *nats.Msg) {
	t.Helper()
	var we, ge Event
	var want, d Batch
	werr := DecodeHead(m, &we)
	if werr == nil && we.Type == TypeCallBatch {
		werr = want.FromEventInto(&we, nil)
	}
	var into [1]Call
	got, gerr := DecodeBatch(m, &ge, &d, into[:0])
	if got != nil && (got != &d || gerr != nil || ge.Type != TypeCallBatch) {
		t.Fatalf("%q: read the data of %q (error %v)", m.Data, ge.Type, gerr)
	}
	if got == nil {
		got = &d
		if gerr == nil && ge.Type == TypeCallBatch {
			gerr = got.FromEventInto(&ge, into[:0])
		}
	}
	if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
		t.Fatalf("%q: error %v, DecodeHead and FromEventInto's %v", m.Data, gerr, werr)
	}
	if !reflect.DeepEqual(ge, we) || werr == nil && !reflect.DeepEqual(*got, want) {
		t.Fatalf("%q:\n got %+v %#v\nwant %+v %#v", m.Data, ge, *got, we, want)
	}
}

// batchEnvelopes are events around data d: a batch, an error, one whose
// data is followed by a member the plain form refuses, one with data
// twice, one with an escape in an attribute, one followed by a newline.
func batchEnvelopes(d string) []string {
	head := `{"specversion":"1.0","id":"r1","source":"bench/agent","type":"%s","datacontenttype":"application/json","time":"2026-12-06T02:44:18.434Z","sessionid":"s1","data":` + d
	return []string{
		fmt.Sprintf(head, TypeCallBatch) + `}`,
		fmt.Sprintf(head, TypeError) + `}`,
		fmt.Sprintf(head, TypeCallBatch) + `,"other":"x"}`,
		fmt.Sprintf(head, TypeCallBatch) + `,"data":{}}`,
		fmt.Sprintf(head, TypeCallBatch) + `,"subject":"a\"b"}`,
		fmt.Sprintf(head, TypeCallBatch) + "}\n",
	}
}

func TestDecodeBatchIsHeadAndFromEvent(t *testing.T) {
	read := 0
	for _, d := range batchSeeds {
		for _, env := range batchEnvelopes(d) {
			m := &nats.Msg{Data: []byte(env)}
			batchReadAgrees(t, m)
			var e Event
			var b Batch
			if got, _ := DecodeBatch(m, &e, &b, nil); got != nil {
				read++
			}
		}
	}
	if read != 10 { // the plain batches of batchSeeds, in the two plain envelopes
		t.Errorf("DecodeBatch read %d batches in the same pass, want 10", read)
	}
	// Binary mode: the data is the caller's to read.
	bin := &nats.Msg{Header: nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"r1"}, "ce-source": {"s"}, "ce-type": {TypeCallBatch}},
		Data: []byte(batchSeeds[0])}
	batchReadAgrees(t, bin)
	// The usual batch of one call, into the caller's array: one
	// allocation, the attributes' string; the calls are read in place.
	m := &nats.Msg{Data: []byte(batchEnvelopes(batchSeeds[0])[0])}
	var e Event
	var b Batch
	var into [1]Call
	if n := testing.AllocsPerRun(100, func() { _, _ = DecodeBatch(m, &e, &b, into[:0]) }); n != 1 && !raceEnabled {
		t.Errorf("DecodeBatch: %v allocations, want 1", n)
	}
}

// DecodeBatch reads a batch's strings and raw members in the message's
// data, each raw member capped: appending to one writes neither the
// message nor another member.
func TestDecodeBatchInPlace(t *testing.T) {
	m := &nats.Msg{Data: []byte(batchEnvelopes(batchSeeds[1])[0])}
	was := string(m.Data)
	var e Event
	var d Batch
	if got, err := DecodeBatch(m, &e, &d, nil); got == nil || err != nil {
		t.Fatalf("DecodeBatch: %v, %v", got, err)
	}
	in := func(b []byte) bool {
		start, at := uintptr(unsafe.Pointer(&m.Data[0])), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		return len(b) > 0 && at >= start && at+uintptr(len(b)) <= start+uintptr(len(m.Data))
	}
	if !in(d.User) || !in(d.Calls[0].Input) || !in(unsafe.Slice(unsafe.StringData(d.Calls[1].ID), len(d.Calls[1].ID))) {
		t.Error("the members are not in the message's data")
	}
	want := fmt.Sprintf("%#v", d)
	_ = append(d.Calls[0].Input, "xxxxxxxx"...)
	_ = append(d.User, "xxxxxxxx"...)
	_ = append(d.Context, "xxxxxxxx"...)
	if string(m.Data) != was || fmt.Sprintf("%#v", d) != want {
		t.Errorf("appending to members wrote the message: %s", m.Data)
	}
	// A message padded past twice its members and inPlaceSlack (a long
	// attribute): its members are copied, so a kept one does not pin it.
	pad := strings.Repeat("x", inPlaceSlack)
	m = &nats.Msg{Data: []byte(strings.Replace(batchEnvelopes(batchSeeds[1])[0], `"sessionid":"s1"`, `"sessionid":"s1","subject":"`+pad+`"`, 1))}
	if got, err := DecodeBatch(m, &e, &d, nil); got == nil || err != nil || e.Subject != pad {
		t.Fatalf("DecodeBatch of the padded batch: %v, %v", got, err)
	}
	if in(d.User) || in(d.Calls[0].Input) || in(unsafe.Slice(unsafe.StringData(d.Calls[1].ID), len(d.Calls[1].ID))) {
		t.Error("the members of a padded batch are in its message's data")
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, d := range batchSeeds {
		for _, env := range batchEnvelopes(d) {
			f.Add([]byte(env))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) { batchReadAgrees(t, &nats.Msg{Data: b}) })
}
