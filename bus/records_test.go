package bus

import (
	"reflect"
	"testing"
	"time"
)

func TestWorkerBeatRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		v    WorkerBeat
		want string
	}{
		{WorkerBeat{}, `{}`},
		{WorkerBeat{Left: true, Binary: true}, `{"left":true}`},
		{WorkerBeat{InFlight: []string{}}, `{"inflight":[]}`},
		{WorkerBeat{InFlight: []string{"s.r.c"}, Binary: true}, `{"inflight":["s.r.c"],"binary":true}`},
	} {
		got := string(tc.v.Encode())
		if got != tc.want {
			t.Errorf("Encode(%+v) = %s, want %s", tc.v, got, tc.want)
		}
		back := DecodeWorkerBeat([]byte(got))
		if !tc.v.Left && !reflect.DeepEqual(back.InFlight, tc.v.InFlight) && len(tc.v.InFlight) > 0 {
			t.Errorf("Decode(%s).InFlight = %v, want %v", got, back.InFlight, tc.v.InFlight)
		}
		if back.Left != tc.v.Left {
			t.Errorf("Decode(%s).Left = %v", got, back.Left)
		}
	}
	if v := DecodeWorkerBeat([]byte("not json")); v.Left || v.InFlight != nil {
		t.Errorf("a bad value decodes to %+v, want a plain beat", v)
	}
}

func TestSharedResults(t *testing.T) {
	c := Call{ID: "c1", Name: "t"}
	for _, tc := range []struct {
		res  Result
		code string
	}{
		{TimeoutResult(c, time.Second), CodeTimeout},
		{InterruptedResult(c), CodeInterrupted},
		{InternalResult(c, errTest), CodeInternal},
		{UnknownOutcomeResult(c), CodeUnknownOutcome},
		{NotRecordedResult(c), CodeUnavailable},
		{NoWorkerResult(c), CodeUnavailable},
	} {
		if tc.res.ID != "c1" || tc.res.Name != "t" || tc.res.Error == nil || tc.res.Error.Code != tc.code {
			t.Errorf("%s: result %+v is not c1's error", tc.code, tc.res)
		}
	}
}

var errTest = Errorf(CodeInternal, "boom")
