package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
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
	benchCalls(b, d.callTool(d.client, toolRead), func() {
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

func BenchmarkRawOneHop(b *testing.B) { benchCalls(b, sharedDeployment(b).oneHop) }

func BenchmarkRawRelay(b *testing.B) { benchCalls(b, sharedDeployment(b).relay) }

func BenchmarkToolbusReadOnly(b *testing.B) {
	d := sharedDeployment(b)
	benchCalls(b, d.callTool(d.client, toolRead))
}

func BenchmarkToolbusWrite(b *testing.B) {
	d := sharedDeployment(b)
	benchCalls(b, d.callTool(d.client, toolWrite))
}

// BenchmarkToolbusReadOnlyParallel drives the router with many concurrent
// callers, the shape of the throughput measurements (and of a profile of
// the router's hot path under load).
func BenchmarkToolbusReadOnlyParallel(b *testing.B) {
	d := sharedDeployment(b)
	fn := d.callTool(d.client, toolRead)
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

// TestRunQuick runs every measurement briefly and checks that the report
// is complete and that nothing Run started is left running.
func TestRunQuick(t *testing.T) {
	before := runtime.NumGoroutine()
	start := time.Now()
	rep, err := Run(t.Context(), Options{Quick: true, Duration: 100 * time.Millisecond, Callers: []int{1, 4},
		Workers: []int{1, 2}, Sessions: 200, Rounds: 1, ProfileWindow: 100 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Run took %v", time.Since(start))
	table, b, doc := rendered(t, rep)
	paths := []string{
		"baseline.one_hop.p50_us", "baseline.one_hop.p90_us", "baseline.one_hop.p99_us",
		"baseline.one_hop.throughput.1", "baseline.one_hop.throughput.4",
		"baseline.relay.p50_us", "baseline.relay.p90_us", "baseline.relay.p99_us",
		"baseline.relay.throughput.1", "baseline.relay.throughput.4",
		"toolbus_write.p50_us", "toolbus_write.throughput.4", "toolbus_write.cpu_us_per_call", "toolbus_write.allocs_per_call",
		"workers.1", "workers.2", "parked_p50_us", "mcp_http_16",
		"ratios.throughput_256", "ratios.p50_1", "ratios.vs_mcp_http_16", "ratios.workers_8_vs_1",
		"router_rss_mib_10k_sessions", "router_heap_mib_10k_sessions", "machine.gomaxprocs",
		"bare.cpu_us_per_call", "bare.allocs_per_call", "bare.p50_us", "bare.throughputs.1", "bare.throughputs.4",
		"ratios.vs_bare.1", "ratios.vs_bare.4", "ratios.p50_vs_bare",
	}
	for _, k := range []string{"p50_us", "p90_us", "p99_us", "throughput.1", "throughput.4", "cpu_us_per_call",
		"allocs_per_call", "router_allocs_per_call"} {
		paths = append(paths, "toolbus."+k)
	}
	// A 100 ms profile holds few samples: a part may have none.
	present := []string{"toolbus.router_cpu_us_per_call_subtracted"}
	if rep.CPUMethod == "profile-labels" {
		present = append(present, "toolbus.cpu_by_part_us.router", "toolbus.cpu_by_part_us.worker",
			"toolbus.cpu_by_part_us.client", "toolbus.cpu_by_part_us.other", "baseline.relay.cpu_by_part_us.router")
	}
	for _, p := range present {
		if v, ok := lookup(doc, p); !ok {
			t.Errorf("report has no %s: %s", p, b)
		} else if _, ok := v.(float64); !ok {
			t.Errorf("%s = %v, want a number", p, v)
		}
	}
	for _, p := range paths {
		v, ok := lookup(doc, p)
		if !ok {
			t.Errorf("report has no %s: %s", p, b)
			continue
		}
		if f, ok := v.(float64); !ok || !(f > 0) {
			t.Errorf("%s = %v, want a positive number", p, v)
		}
	}
	if v, _ := lookup(doc, "machine.go_version"); v == "" || v == nil {
		t.Errorf("machine.go_version is empty")
	}
	if len(rep.Targets) != 10 { // issue 20's five; issue 9's three, and toolbus/bare at each of the two caller counts
		t.Errorf("%d targets, want 10", len(rep.Targets))
	}
	for _, want := range []string{"raw relay", "toolbus read-only", "vs_bare_4", "router_rss_mib", "vs_mcp_http_4", "workers_8_vs_1", "issue 20", "MISSED"} {
		if want == "MISSED" {
			continue // whether anything is missed depends on the machine
		}
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if rep.Sessions.Cached < 200 {
		t.Errorf("router caches %d sessions, want at least 200", rep.Sessions.Cached)
	}

	// Everything Run started has stopped (goroutines may take a moment).
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			return fmt.Errorf("%d goroutines after Run, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
		}
		return nil
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

func TestCPUByLabel(t *testing.T) {
	parts, err := cpuByPart(func() error {
		var wg sync.WaitGroup
		for _, part := range []string{partRouter, partWorker} {
			wg.Add(1)
			labelled(context.Background(), part, func(context.Context) {
				go func() {
					defer wg.Done()
					end := time.Now().Add(300 * time.Millisecond)
					x := 0
					for time.Now().Before(end) {
						x++
					}
					_ = x
				}()
			})
		}
		wg.Wait()
		return nil
	})
	if err == errProfiling {
		t.Skip("CPU profiler in use")
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{partRouter, partWorker} {
		if parts[p] < 10*time.Millisecond { // busy for 300 ms, on a possibly crowded machine
			t.Errorf("%s: %v of CPU, want about 300ms (all: %v)", p, parts[p], parts)
		}
	}
}

// TestReport runs the whole benchmark when TOOLBUS_BENCH is "full" or
// "quick" and prints the table; TOOLBUS_BENCH_JSON=FILE also writes the
// JSON report to FILE. It is how docs/performance.md was produced before
// `toolbus bench` existed:
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
