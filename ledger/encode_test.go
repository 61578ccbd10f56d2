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
