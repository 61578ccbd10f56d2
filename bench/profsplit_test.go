package bench

import (
	"testing"

	"github.com/google/pprof/profile"
)

// fakeProfile is a CPU profile with one sample per stack, each 1 ms; a
// stack lists its functions innermost first.
func fakeProfile(stacks ...[]string) *profile.Profile {
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}}}
	fns := map[string]*profile.Function{}
	for _, st := range stacks {
		s := &profile.Sample{Value: []int64{1, 1e6}}
		for _, name := range st {
			fn := fns[name]
			if fn == nil {
				fn = &profile.Function{ID: uint64(len(fns) + 1), Name: name}
				fns[name] = fn
			}
			s.Location = append(s.Location, &profile.Location{Line: []profile.Line{{Function: fn}}})
		}
		p.Sample = append(p.Sample, s)
	}
	return p
}

func TestSplitSamples(t *testing.T) {
	p := fakeProfile(
		[]string{"runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker"},
		[]string{"runtime.memclr", "runtime.mallocgc", "github.com/goccy/go-json.Marshal", "github.com/toolbus/toolbus/router.execEvent"},
		[]string{"runtime.scanobject", "runtime.gcAssistAlloc", "runtime.mallocgc", "github.com/toolbus/toolbus/router.execEvent"},
		[]string{"github.com/goccy/go-json/internal/encoder/vm.Run", "github.com/toolbus/toolbus/router.execEvent"},
		[]string{"internal/runtime/syscall/linux.Syscall6", "syscall.write", "github.com/nats-io/nats%2ego.(*Conn).flusher"},
		[]string{"github.com/toolbus/toolbus/router.(*batch).run"},
		[]string{"runtime.usleep"},
		[]string{"syscall.Pwrite", "github.com/nats-io/nats-server/v2/server.(*msgBlock).writeAt", "github.com/nats-io/nats-server/v2/server.(*fileStore).StoreMsg"},
		[]string{"runtime.mapaccess2_faststr", "github.com/nats-io/nats-server/v2/server.(*stream).checkMsgId"},
		[]string{"github.com/nats-io/nats-server/v2/server.(*Sublist).match", "github.com/nats-io/nats-server/v2/server.(*client).parse"},
	)
	got, err := splitSamples(p, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"garbage collector (marking, assists, sweeping)": 2000.0 / 10,
		"allocation":                       1000.0 / 10,
		"JSON":                             1000.0 / 10,
		"socket writes (sending messages)": 1000.0 / 10,
		"toolbus":                          1000.0 / 10,
		otherKind:                          1000.0 / 10,
		"nats-server JetStream (stream store, dedupe)": 2000.0 / 10,
		"nats-server (parse, match, deliver)":          1000.0 / 10,
	}
	if len(got) != len(want) {
		t.Fatalf("kinds %+v, want %v", got, want)
	}
	for _, s := range got {
		if w, ok := want[s.Kind]; !ok || s.USPerCall < w-1e-9 || s.USPerCall > w+1e-9 {
			t.Errorf("%s: %.3f µs per call, want %.3f", s.Kind, s.USPerCall, w)
		}
	}
	if got[0].Kind != "garbage collector (marking, assists, sweeping)" {
		t.Errorf("largest first: %+v", got)
	}
	if _, err := splitSamples(&profile.Profile{}, 1); err == nil {
		t.Error("a profile without cpu values split")
	}
}
