package ledger

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// encode gives the value json.Marshal gives, and what it writes decodes
// back to the entry.
func TestEncode(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 41, 34, 452201362, time.UTC)
	res := bus.Result{ID: "c1", Name: "write_file", State: bus.StateSuccess, Output: bus.Text("done \"ok\""), Metadata: json.RawMessage(`{"k":1}`)}
	for _, e := range []Entry{
		{},
		{State: stateRunning, Router: "r-1", Claim: "p-7", Deadline: at.Add(time.Minute), Touched: at},
		{State: stateRunning, Router: "r-1", Claim: "p-8", Call: "compactDigest", Canon: "canonicalDigest", Deadline: at, Touched: at},
		{State: stateDone, Router: "r\u2028", Deadline: at.In(time.FixedZone("x", 3600)), Result: &res},
		{State: stateDone, Router: "r", Claim: "p-9", Deadline: at, ResultRef: "s.r.c1.ABC.ledger#SHA-256=x_y="}, // 1.24
		// 1.32: the cancel a durable worker's interrupted result names
		{State: stateDone, Router: "r", Claim: "p-10", Deadline: at, Result: ptrTo(bus.InterruptedResult(bus.Call{ID: "c3", Name: "job"})), Cancel: "cancel-1"},
		{State: stateAbandoned, Router: "r", Deadline: at, Result: ptrTo(bus.ErrorResult(bus.Call{ID: "c2", Name: "t"}, bus.CodeUnknownOutcome, "gone"))},
	} {
		got := encode(&e)
		want, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		_ = json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("encode\n got %s\nwant %s", got, want)
		}
		var back Entry
		if err := json.Unmarshal(got, &back); err != nil || !back.Deadline.Equal(e.Deadline) || back.Claim != e.Claim || back.Call != e.Call || back.Canon != e.Canon || (back.Result == nil) != (e.Result == nil) {
			t.Errorf("%s decodes to %+v (%v)", got, back, err)
		}
	}
	// A result whose metadata is not JSON is recorded as an internal
	// error, never as a value that cannot be read back.
	bad := Entry{State: stateDone, Result: &bus.Result{ID: "c3", Name: "t", Metadata: json.RawMessage(`{`)}}
	var back Entry
	if err := json.Unmarshal(encode(&bad), &back); err != nil || back.Result == nil || back.Result.Error == nil || back.Result.Error.Code != bus.CodeInternal {
		t.Errorf("bad metadata: %+v, %v", back, err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// appendTime writes what AppendFormat's RFC3339Nano writes, in quotes, for
// any time: by hand for UTC ones, by AppendFormat for the rest.
func FuzzAppendTime(f *testing.F) {
	for _, t := range []time.Time{{}, time.Date(2026, 12, 6, 9, 5, 7, 450000000, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(1969, 2, 28, 0, 0, 0, 1, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 100, time.UTC)} {
		f.Add(t.Unix(), int64(t.Nanosecond()), 0, false)
	}
	f.Add(int64(1764998400), int64(120), 3600, true)
	f.Fuzz(func(t *testing.T, sec, nsec int64, offset int, zoned bool) {
		at := time.Unix(sec, nsec).UTC()
		if zoned {
			at = at.In(time.FixedZone("z", offset%(24*3600)))
		}
		want := append(at.AppendFormat([]byte(`x"`), time.RFC3339Nano), '"')
		if got := appendTime([]byte("x"), at); string(got) != string(want) {
			t.Fatalf("appendTime(%v) = %s, want %s", at, got, want)
		}
	})
}

func BenchmarkAppendTime(b *testing.B) {
	at, buf := time.Date(2026, 12, 6, 9, 5, 7, 452201362, time.UTC), make([]byte, 0, 64)
	for b.Loop() {
		buf = appendTime(buf[:0], at)
	}
}

// A record encoded from its claim's value as written is the value encode
// gives the record.
func TestEncodeRecordFromClaim(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 41, 34, 452201362, time.UTC)
	l := &Ledger{reuse: true}
	for _, claim := range []Entry{
		{State: stateRunning, Router: "r-1", Claim: "p-7", Deadline: at.Add(time.Minute), Touched: at},
		{State: stateRunning, Router: "r\u2028\"", Claim: "p-8", Call: "compactDigest", Canon: "canonicalDigest", Deadline: at},
	} {
		for _, res := range []bus.Result{
			{ID: "c1", Name: "write_file", State: bus.StateSuccess, Output: bus.Text("done \"ok\"")},
			{ID: "c3", Name: "t", Metadata: json.RawMessage(`{`)}, // recorded as an internal error
		} {
			_, claim.written = encodePooled(l, &claim)
			done := claim
			done.State, done.Result = stateDone, &res
			got, _ := encodeRecord(l, &done, claim.written)
			if want := encode(&done); string(got) != string(want) {
				t.Errorf("record from its claim\n got %s\nwant %s", got, want)
			}
		}
	}
}
