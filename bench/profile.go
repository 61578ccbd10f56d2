package bench

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// errProfiling says the CPU profiler was busy (e.g. go test -cpuprofile).
var errProfiling = errors.New("bench: the CPU profiler is in use")

// cpuByPart runs fn under the CPU profiler and returns the CPU time its
// samples attribute to each part (the labelKey goroutine label; unlabelled
// samples count as partOther).
func cpuByPart(fn func() error) (map[string]time.Duration, error) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return nil, errProfiling
	}
	err := fn()
	pprof.StopCPUProfile()
	if err != nil {
		return nil, err
	}
	p, err := profile.ParseData(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("bench: profile: %w", err)
	}
	vi, err := cpuValue(p)
	if err != nil {
		return nil, err
	}
	out := map[string]time.Duration{}
	for _, s := range p.Sample {
		part := partOther
		if l := s.Label[labelKey]; len(l) > 0 {
			part = l[0]
		}
		out[part] += time.Duration(s.Value[vi])
	}
	return out, nil
}

// cpuValue is the index of a CPU profile's nanoseconds in its samples.
func cpuValue(p *profile.Profile) (int, error) {
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			return i, nil
		}
	}
	return 0, errors.New("bench: the profile has no cpu nanoseconds")
}

// Share is the part of a CPU profile one kind of work took.
type Share struct {
	Kind      string  `json:"kind"`
	USPerCall float64 `json:"us_per_call"`
	Percent   float64 `json:"percent"`
}

// shareKinds sorts a sample by its stack, the innermost frame first:
// the first kind with a frame that starts with one of its prefixes
// anywhere on the stack takes the sample. The collector and the
// allocator come first (they run inside everything else), then the
// kernel's sends and receives, then what the stack says it is doing.
var shareKinds = []struct {
	kind     string
	prefixes []string
}{
	{"garbage collector (marking, assists, sweeping)", []string{"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcStart", "runtime.markroot"}},
	{"stack growth", []string{"runtime.newstack", "runtime.copystack"}},
	{"allocation", []string{"runtime.mallocgc", "runtime.newobject", "runtime.makeslice", "runtime.growslice", "runtime.makemap", "runtime.mapassign"}},
	{"socket writes (sending messages)", []string{"syscall.write", "syscall.Write", "internal/poll.(*FD).Write", "internal/poll.(*FD).Writev"}},
	{"socket reads (receiving messages)", []string{"syscall.read", "syscall.Read", "internal/poll.(*FD).Read"}},
	{"scheduler, preemption and wakeups", []string{"runtime.asyncPreempt", "runtime.schedule", "runtime.findRunnable", "runtime.park_m", "runtime.futex", "runtime.notewakeup", "runtime.ready", "runtime.goready", "runtime.wakep", "runtime.selectgo", "runtime.chansend", "runtime.chanrecv", "runtime.netpoll", "runtime.mcall", "runtime.goexit0", "runtime.lock", "runtime.unlock"}},
	{"JSON", []string{"github.com/goccy/go-json", "encoding/json", "github.com/toolbus/toolbus/bus.appendString", "github.com/toolbus/toolbus/bus.(*ExecRequest).AppendJSON", "github.com/toolbus/toolbus/bus.(*Result).AppendJSON", "github.com/santhosh-tekuri/jsonschema"}},
	{"JetStream client (publish, acknowledgement)", []string{"github.com/nats-io/nats.go/jetstream"}},
	{"NATS client (parse, dispatch, headers, publish)", []string{"github.com/nats-io/nats.go", "github.com/nats-io/nats%2ego"}},
	{"contexts and timers", []string{"context.", "time."}},
	{"toolbus", []string{"github.com/toolbus/toolbus/"}},
}

// otherKind is the kind of a sample no shareKinds entry took.
const otherKind = "other (runtime, profiler)"

// SplitProfile reads the CPU profile in file and returns how its samples
// divide by kind, as µs per call over calls, largest first.
func SplitProfile(file string, calls int64) ([]Share, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	p, err := profile.ParseData(b)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", file, err)
	}
	return splitSamples(p, calls)
}

// splitSamples divides p's CPU time by kind.
func splitSamples(p *profile.Profile, calls int64) ([]Share, error) {
	vi, err := cpuValue(p)
	if err != nil {
		return nil, err
	}
	ns := map[string]int64{}
	var total int64
	for _, s := range p.Sample {
		v := s.Value[vi]
		ns[kindOf(s)] += v
		total += v
	}
	out := make([]Share, 0, len(ns))
	for k, v := range ns {
		sh := Share{Kind: k, Percent: 100 * float64(v) / float64(max(total, 1))}
		if calls > 0 {
			sh.USPerCall = float64(v) / 1e3 / float64(calls)
		}
		out = append(out, sh)
	}
	slices.SortFunc(out, func(a, b Share) int {
		return cmp.Or(cmp.Compare(b.Percent, a.Percent), strings.Compare(a.Kind, b.Kind))
	})
	return out, nil
}

// kindOf is the shareKinds kind of sample s.
func kindOf(s *profile.Sample) string {
	for _, k := range shareKinds {
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				for _, pre := range k.prefixes {
					if strings.HasPrefix(line.Function.Name, pre) {
						return k.kind
					}
				}
			}
		}
	}
	return otherKind
}
