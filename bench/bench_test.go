package bench

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// shared is the deployment of the Go benchmarks, started by the first one
// that needs it and stopped by TestMain.
var shared struct {
	once sync.Once
	d    *deployment
	err  error
}

// sharedCross is the cross-process deployment of the Go benchmarks.
var sharedCross struct {
	once sync.Once
	d    *deployment
	err  error
}

func TestMain(m *testing.M) {
	RunChild() // the cross-process tests run this binary as each part
	code := m.Run()
	if shared.d != nil {
		shared.d.close(context.Background())
	}
	if sharedCross.d != nil {
		sharedCross.d.close(context.Background())
	}
	os.Exit(code)
}

func sharedDeployment(b *testing.B) *deployment {
	b.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared.d, shared.err = deploy(ctx, config{sessions: 1})
	})
	if shared.err != nil {
		b.Fatal(shared.err)
	}
	return shared.d
}

func sharedCrossDeployment(b *testing.B) *deployment {
	b.Helper()
	sharedCross.once.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			sharedCross.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sharedCross.d, sharedCross.err = deploy(ctx, config{exe: exe, sessions: 1})
	})
	if sharedCross.err != nil {
		b.Fatal(sharedCross.err)
	}
	return sharedCross.d
}

// BenchmarkCrossProcessReadOnly calls the read-only tool from one caller
// through the router in its own process (TestMain re-executes this binary
// as each part); router-µs/op and router-allocs/op are the router
// process's own, from its getrusage and runtime.MemStats, worker-µs/op and
// worker-allocs/op the worker process's (the worker SDK), allocs/op and
// client-µs/op this process's (the client SDK and the loop).
func BenchmarkCrossProcessReadOnly(b *testing.B) {
	d := sharedCrossDeployment(b)
	var before snapshot
	benchCalls(b, d.callTool(toolRead), func() {
		var err error
		if before, err = d.snapshot(b.Context()); err != nil {
			b.Fatal(err)
		}
	}, func() {
		after, err := d.snapshot(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		per := func(role string, allocs bool) float64 {
			if allocs {
				return perCallOf(float64(after[role].Mallocs-before[role].Mallocs), int64(b.N))
			}
			return perCallOf(float64(after[role].CPUNS-before[role].CPUNS)/1e3, int64(b.N))
		}
		b.ReportMetric(per(roleRouter, false), "router-µs/op")
		b.ReportMetric(per(roleRouter, true), "router-allocs/op")
		b.ReportMetric(perCallOf(float64(after[roleRouter].Writes-before[roleRouter].Writes), int64(b.N)), "router-writes/op")
		b.ReportMetric(per(roleWorker, false), "worker-µs/op")
		b.ReportMetric(per(roleWorker, true), "worker-allocs/op")
		b.ReportMetric(per(roleClient, false), "client-µs/op")
	})
}

// benchCalls calls fn b.N times from one caller (this process's
// allocations are the client SDK's) and reports the median and p99
// latency next to ns/op; around, when given, are called just before the
// calls and just after.
func benchCalls(b *testing.B, fn callFunc, around ...func()) {
	b.Helper()
	ctx := b.Context()
	for range 10 { // warm up connections and caches
		if err := fn(ctx, 0); err != nil {
			b.Fatal(err)
		}
	}
	if len(around) == 2 {
		around[0]()
	}
	lat := make(Latencies, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	writes, scheds := testkit.WriteCalls(), schedules()
	for range b.N {
		t0 := time.Now()
		if err := fn(ctx, 0); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(perCallOf(float64(testkit.WriteCalls()-writes), int64(b.N)), "writes/op")
	b.ReportMetric(perCallOf(float64(schedules()-scheds), int64(b.N)), "scheds/op")
	if len(around) == 2 {
		around[1]()
	}
	slices.Sort(lat)
	b.ReportMetric(us(lat.Quantile(0.5)), "p50-µs")
	b.ReportMetric(us(lat.Quantile(0.99)), "p99-µs")
}

func BenchmarkRawOneHop(b *testing.B) { benchCalls(b, sharedDeployment(b).raw(rawEcho)) }

func BenchmarkRawRelay(b *testing.B) { benchCalls(b, sharedDeployment(b).raw(rawRelay)) }

func BenchmarkToolbusReadOnly(b *testing.B) {
	d := sharedDeployment(b)
	benchCalls(b, d.callTool(toolRead))
}

func BenchmarkToolbusWrite(b *testing.B) {
	d := sharedDeployment(b)
	benchCalls(b, d.callTool(toolWrite))
}

// BenchmarkToolbusReadOnlyParallel drives the router with many concurrent
// callers, the shape of the throughput measurements (and of a profile of
// the router's hot path under load).
func BenchmarkToolbusReadOnlyParallel(b *testing.B) {
	d := sharedDeployment(b)
	fn := d.callTool(toolRead)
	b.ReportAllocs()
	b.SetParallelism(8) // 8 × GOMAXPROCS callers
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := fn(b.Context(), 0); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkParked(b *testing.B) {
	d := sharedDeployment(b)
	const session = "bench-parked-go"
	ev, err := d.client.Watch(b.Context(), session)
	if err != nil {
		b.Fatal(err)
	}
	defer ev.Stop(b.Context())
	benchCalls(b, func(ctx context.Context, _ int) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := parkAndAnswer(ctx, d, ev, session)
		return err
	})
}

// rendered returns the report's table, its JSON and the JSON decoded.
func rendered(t *testing.T, rep interface{ WriteTable(io.Writer) }) (*strings.Builder, []byte, map[string]any) {
	t.Helper()
	var table strings.Builder
	rep.WriteTable(&table)
	t.Log("\n" + table.String())
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return &table, b, doc
}

// lookup finds a dotted path in a decoded JSON document.
func lookup(doc map[string]any, path string) (any, bool) {
	var cur any = doc
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// TestReport runs the whole comparison when TOOLBUS_BENCH is "full" or
// "quick" and prints the table; TOOLBUS_BENCH_JSON=FILE also writes the
// JSON report to FILE (docs/performance.md was first produced this way):
//
//	TOOLBUS_BENCH=full TOOLBUS_BENCH_JSON=/tmp/bench.json go test ./bench -run TestReport -v -timeout 30m
func TestReport(t *testing.T) {
	mode := os.Getenv("TOOLBUS_BENCH")
	if mode == "" {
		t.Skip("set TOOLBUS_BENCH=full or TOOLBUS_BENCH=quick to run the whole benchmark")
	}
	rep, err := Run(t.Context(), Options{Quick: mode == "quick", Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	rep.WriteTable(os.Stdout)
	if path := os.Getenv("TOOLBUS_BENCH_JSON"); path != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// schedules estimates how many times this process's goroutines have been
// scheduled to run so far: a goroutine woken by another's hand-off, a
// timer or the network counts once per wake-up. The runtime samples one
// transition in 8 into runtime/metrics' /sched/latencies:seconds, whose
// count this is, times 8.
func schedules() uint64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	var n uint64
	for _, c := range s[0].Value.Float64Histogram().Counts {
		n += c
	}
	return 8 * n
}
