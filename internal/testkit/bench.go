package testkit

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/nats-io/nats-server/v2/server"
)

// PartLabel is the profiler label that names the part of an SDK's per-call
// benchmark a goroutine belongs to ("caller", "responder").
const PartLabel = "part"

// Labelled runs f, and the goroutines it starts, with profiler label part.
func Labelled(part string, f func()) {
	pprof.Do(context.Background(), pprof.Labels(PartLabel, part), func(context.Context) { f() })
}

// BenchCalls runs b.N calls from callers goroutines after warm ones and
// reports msgs/op (received by s), writes/op, cpu-µs/op and, unless under
// -cpuprofile, <part>-µs/op per label (10 ms samples: want 20,000 calls).
func BenchCalls(b *testing.B, s *server.Server, callers, warm int, parts []string, call func(ctx context.Context, i int) error) {
	b.Helper()
	ctx := pprof.WithLabels(context.Background(), pprof.Labels(PartLabel, "caller"))
	for range warm {
		if err := call(ctx, 0); err != nil {
			b.Fatal(err)
		}
	}
	next := make(chan int, callers)
	for i := range callers {
		next <- i
	}
	b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	var prof bytes.Buffer
	profiling := pprof.StartCPUProfile(&prof) == nil
	b.ResetTimer()
	msgs, writes := inMsgs(b, s), WriteCalls()
	before := ProcessCPU()
	b.RunParallel(func(pb *testing.PB) {
		pprof.SetGoroutineLabels(ctx)
		i := 0
		select {
		case i = <-next:
		default:
		}
		for pb.Next() {
			if err := call(ctx, i); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((ProcessCPU()-before).Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(inMsgs(b, s)-msgs)/float64(b.N), "msgs/op")
	if w := WriteCalls(); w >= 0 && writes >= 0 {
		b.ReportMetric(float64(w-writes)/float64(b.N), "writes/op")
	}
	if !profiling {
		return
	}
	pprof.StopCPUProfile()
	p, err := profile.Parse(&prof)
	if err != nil {
		b.Fatal(err)
	}
	ns := map[string]int64{}
	for _, s := range p.Sample {
		if l := s.Label[PartLabel]; len(l) > 0 {
			ns[l[0]] += s.Value[1] // CPU nanoseconds
		}
	}
	for _, part := range parts {
		b.ReportMetric(float64(ns[part])/1e3/float64(b.N), part+"-µs/op")
	}
}

// inMsgs is how many messages s has received from its clients so far.
func inMsgs(b *testing.B, s *server.Server) int64 {
	v, err := s.Varz(nil)
	if err != nil {
		b.Fatal(err)
	}
	return v.InMsgs
}

// BenchCallers is the callers a benchmark runs: TOOLBUS_BENCH_CALLERS if
// set to a positive number, else def.
func BenchCallers(def int) int {
	if n, err := strconv.Atoi(os.Getenv("TOOLBUS_BENCH_CALLERS")); err == nil && n > 0 {
		return n
	}
	return def
}
