package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/trace"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

func TestWriteProfile(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/tmp/router.prof", "/tmp/router.write.prof"},
		{"router.prof", "router.write.prof"},
		{"/tmp/a.b/router", "/tmp/a.b/router.write"},
		{"router", "router.write"},
	} {
		if got := profileBeside(tc.in, "write"); got != tc.want {
			t.Errorf("profileBeside(%q, write) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestReadStats: a child's CPU and write calls are the process's own, as
// testkit (which the bench binary does not link) reads them.
func TestReadStats(t *testing.T) {
	cpu, writes := testkit.ProcessCPU().Nanoseconds(), testkit.WriteCalls()
	s := readStats(false)
	cpuAfter, writesAfter := testkit.ProcessCPU().Nanoseconds(), testkit.WriteCalls()
	if s.CPUNS < cpu || s.CPUNS > cpuAfter || s.Writes < writes || s.Writes > writesAfter || s.RSSKB <= 0 || s.HWMKB < s.RSSKB {
		t.Fatalf("readStats = %+v; testkit: cpu %d..%d ns, writes %d..%d", s, cpu, cpuAfter, writes, writesAfter)
	}
}

func TestOtherCores(t *testing.T) {
	for _, tc := range []struct {
		name string
		diff snapshot
		wall time.Duration
		want float64
	}{
		{"no /proc/stat", snapshot{roleRouter: {CPUNS: 1e9}}, time.Second, 0},
		{"ours only", snapshot{roleRouter: {CPUNS: 1e9}, roleMachine: {CPUNS: 1e9}}, time.Second, 0},
		{"one core of others", snapshot{roleRouter: {CPUNS: 5e8}, roleClient: {CPUNS: 5e8}, roleMachine: {CPUNS: 2e9}}, time.Second, 1},
		{"tick rounding below ours", snapshot{roleRouter: {CPUNS: 1e9}, roleMachine: {CPUNS: 9e8}}, time.Second, 0},
		{"no wall time", snapshot{roleMachine: {CPUNS: 1e9}}, 0, 0},
	} {
		if got := (costed{Load: Load{Wall: tc.wall}, diff: tc.diff}).otherCores(); got != tc.want {
			t.Errorf("%s: otherCores = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSpreads(t *testing.T) {
	runs := []RunResult{
		{Targets: []Target{{Name: "a", Op: ">=", Limit: 1, Value: 2, Met: true}, {Name: "b", Op: "<=", Limit: 1, Value: 3}}},
		{Targets: []Target{{Name: "a", Op: ">=", Limit: 1, Value: 0.5}, {Name: "b", Op: "<=", Limit: 1, Value: 1, Met: true}}},
		{Targets: []Target{{Name: "a", Op: ">=", Limit: 1, Value: 1, Met: true}, {Name: "b", Op: "<=", Limit: 1, Value: 2}}},
	}
	got := spreads(runs)
	if len(got) != 2 {
		t.Fatalf("%d spreads, want 2", len(got))
	}
	a, b := got[0], got[1]
	if a.Name != "a" || a.Min != 0.5 || a.Median != 1 || a.Max != 2 || a.Met != 2 || len(a.Values) != 3 || a.Values[0] != 2 {
		t.Errorf("a: %+v", a)
	}
	if b.Name != "b" || b.Min != 1 || b.Median != 2 || b.Max != 3 || b.Met != 1 {
		t.Errorf("b: %+v", b)
	}
	if spreads(nil) != nil {
		t.Error("spreads of no runs is not nil")
	}
}

// TestCrossDeployment starts the cross-process deployment (this test
// binary re-executed as each part: TestMain calls RunChild), calls through
// it, checks the control requests, bad ones included, and that close
// leaves no process behind.
func TestCrossDeployment(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	file, natsFile := filepath.Join(t.TempDir(), "router.prof"), filepath.Join(t.TempDir(), "nats.prof")
	d, err := deploy(ctx, config{exe: exe, sessions: 2, mcpClients: 2, profiles: map[string][]string{roleRouter: {file}, roleNATS: {natsFile}}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			d.close(ctx)
		}
	}()
	before, err := d.stats(ctx, roleRouter, ctlRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		for _, fn := range []callFunc{d.raw(rawRelay), d.callTool(toolRead), d.callTool(toolWrite), d.mcp.call} {
			if err := fn(ctx, i); err != nil {
				t.Fatal(err)
			}
		}
	}
	after, err := d.stats(ctx, roleRouter, ctlRequest{GC: true})
	if err != nil {
		t.Fatal(err)
	}
	if after.CPUNS <= before.CPUNS || after.Mallocs <= before.Mallocs || after.RSSKB <= 0 || after.HWMKB < after.RSSKB || after.NumGC <= before.NumGC {
		t.Errorf("router stats did not move with calls and a GC: before %+v, after %+v", before, after)
	}

	// Bad control requests get an error and change nothing.
	m, err := d.ctl.RequestWithContext(ctx, ctlSubject(roleRouter), []byte("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m.Data), "bad control request") {
		t.Errorf("bad control request answered %s", m.Data)
	}
	off := ""
	if _, err := d.stats(ctx, roleRouter, ctlRequest{Profile: &off}); err == nil || !strings.Contains(err.Error(), "no profile running") {
		t.Errorf("stopping a profile that is not running: %v", err)
	}
	// Only the files the parent named at start may be written, by the
	// router and by nats-server (the other's file neither).
	other := filepath.Join(t.TempDir(), "x.prof")
	for role, f := range map[string]string{roleRouter: other, roleNATS: file} {
		if _, err := d.stats(ctx, role, ctlRequest{Profile: &f}); err == nil || !strings.Contains(err.Error(), "not a profile file") {
			t.Errorf("%s: a profile into a file not named at start: %v", role, err)
		}
	}
	for _, f := range []string{other, file, profileBeside(file, "heap")} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s was created: %v", f, err)
		}
	}

	// A profile while calls run is written and stopped, with the heap's
	// beside it.
	profs, err := profileRun(ctx, d, map[string]string{roleRouter: file, roleNATS: natsFile}, 200*time.Millisecond, 2, d.callTool(toolRead))
	if err != nil {
		t.Fatal(err)
	}
	if len(profs) != 2 || profs[1].Calls <= 0 || profs[1].CPUUSPerCall <= 0 || profs[1].File != file || profs[1].Role != roleRouter || !sampled(profs[1]) ||
		profs[0].File != natsFile || profs[0].Role != roleNATS || profs[0].CPUUSPerCall <= 0 {
		t.Errorf("profiles %+v", profs)
	}
	for _, f := range []string{file, profileBeside(file, "heap"), natsFile, profileBeside(natsFile, "heap")} {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s: %v", f, err)
		}
	}
	if _, err := d.stats(ctx, roleRouter, ctlRequest{Profile: &off}); err == nil {
		t.Error("the profile still runs after profile returned")
	}

	pids := map[string]int{}
	for role, c := range d.children {
		pids[role] = c.Pid()
	}
	d.close(ctx)
	closed = true
	for role, pid := range pids {
		if !processGone(pid) {
			t.Errorf("%s process %d still runs after close", role, pid)
		}
	}
}

// TestRunQuick runs the comparison briefly and checks the report is
// complete and that nothing Run started is left running.
func TestRunQuick(t *testing.T) {
	before := runtime.NumGoroutine()
	prof := filepath.Join(t.TempDir(), "router.prof")
	rep, err := Run(t.Context(), Options{Runs: 2, Duration: 100 * time.Millisecond, Callers: []int{1, 4}, Workers: []int{1, 2},
		Sessions: 300, CPUProfile: prof, ProfileWindow: 200 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	table, b, doc := rendered(t, rep)
	runs, _ := doc["runs"].([]any)
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	positive := func(where string, doc map[string]any, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if v, ok := lookup(doc, k); !ok {
				t.Errorf("%s has no %s: %s", where, k, b)
			} else if f, ok := v.(float64); !ok || !(f > 0) {
				t.Errorf("%s: %s = %v, want a positive number", where, k, v)
			}
		}
	}
	for _, r := range runs {
		run := r.(map[string]any)
		where := fmt.Sprint("run ", run["run"])
		for _, p := range []string{"one_hop", "relay", "toolbus", "toolbus_write"} {
			for _, k := range []string{"p50_us", "p90_us", "p99_us", "throughput.1", "throughput.4",
				"cpu_us_per_call.4.worker", "cpu_us_per_call.4.client", "cpu_us_per_call.4.nats"} {
				positive(where, run, p+"."+k)
			}
			if p != "one_hop" {
				positive(where, run, p+".cpu_us_per_call.4.router", p+".allocs_per_call.4.router")
			} else if _, ok := lookup(run, "one_hop.cpu_us_per_call.4.router"); ok {
				t.Errorf("%s: one_hop has a forwarder's CPU", where)
			}
		}
		positive(where, run, "ratios.vs_relay.4", "ratios.write_vs_relay.4", "ratios.p50_1", "ratios.write_p50_1",
			"ratios.vs_mcp_http", "pids.router", "pids.mcp", "mcp_http.p50_us", "mcp_http.throughput.4",
			"mcp_http.cpu_us_per_call.4.router", "mcp_http.cpu_us_per_call.4.client", "sdk_over_raw.callers",
			"sdk_over_raw.sdk_calls_per_s")
		for _, way := range []string{"in_step", "spread"} {
			for _, k := range []string{"calls_per_s", "worker_us", "client_us", "pacing_us"} {
				positive(where, run, "sdk_over_raw."+way+"."+k)
			}
		}
		for _, k := range []string{"worker_over_raw_us", "client_over_raw_us", "in_step.worker_over_us", "spread.client_over_us"} {
			if v, ok := lookup(run, "sdk_over_raw."+k); !ok { // it may be below zero
				t.Errorf("%s has no sdk_over_raw.%s", where, k)
			} else if f, ok := v.(float64); !ok || math.IsNaN(f) || math.IsInf(f, 0) {
				t.Errorf("%s: sdk_over_raw.%s = %v, want a number", where, k, v)
			}
		}
	}
	for _, run := range rep.Runs {
		o, worker, client := run.OverRaw, run.Toolbus.CPUUSPerCall["4"][partWorker], run.Toolbus.CPUUSPerCall["4"][partClient]
		if o.Callers != 4 || o.WorkerOverRawUS != o.InStep.WorkerOverUS || o.ClientOverRawUS != o.InStep.ClientOverUS {
			t.Errorf("run %d: %+v", run.Run, o)
		}
		for _, tw := range []RawTwin{o.InStep, o.Spread} {
			// Paced, it cannot run faster than toolbus did but for the
			// callers' first calls (a window is at least minSlice); on a
			// loaded machine it may run slower.
			if tw.Rate > o.SDKRate+4/minSlice.Seconds() {
				t.Errorf("run %d: a raw twin ran at %.0f calls/s, faster than toolbus's %.0f", run.Run, tw.Rate, o.SDKRate)
			}
			if math.Abs(tw.WorkerUS+tw.WorkerOverUS-worker) > 1e-9 || math.Abs(tw.ClientUS-tw.PacingUS+tw.ClientOverUS-client) > 1e-9 {
				t.Errorf("run %d: twin %+v does not add up to the worker's %v and the client's %v", run.Run, tw, worker, client)
			}
		}
	}
	positive("report", doc, "parked.p50_us", "parked.p99_us", "parked.park_p50_us", "parked.answer_to_done_p50_us",
		"parked.calls", "workers.1", "workers.2", "sessions.heap_mib_after", "sessions.rss_mib_after", "machine.gomaxprocs")
	if v, _ := lookup(doc, "machine.go_version"); v == "" || v == nil {
		t.Errorf("machine.go_version is empty")
	}
	if len(rep.Targets) != 8 { // issue 20's seven per run, and the I/O-bound tool's scaling once
		t.Errorf("%d targets, want 8", len(rep.Targets))
	}
	for _, s := range rep.Targets {
		if want := map[bool]int{true: 1, false: 2}[s.Name == "workers_8_vs_1"]; len(s.Values) != want {
			t.Errorf("target %s: %d values, want %d", s.Name, len(s.Values), want)
		}
	}
	if rep.Sessions == nil || rep.Sessions.Count != 300 || rep.Sessions.Cached < 300 || rep.Sessions.RSSMiBAfter <= 0 || rep.Sessions.PeakRSSMiB <= 0 {
		t.Errorf("sessions: %+v", rep.Sessions)
	}
	// nats-server, router and worker during read-only calls, the router
	// during write calls, the client, nats-server and the worker during
	// read-only calls at 4 callers, and nats-server during relayed ones;
	// each with its heap profile beside it.
	roles := []string{roleNATS, roleRouter, roleWorker, roleRouter, roleClient, roleNATS, roleWorker, roleNATS}
	if len(rep.Profiles) != len(roles) {
		t.Fatalf("profiles %v, want %v", rep.Profiles, roles)
	}
	for i, role := range roles {
		p := rep.Profiles[i]
		if fi, err := os.Stat(p.File); err != nil || fi.Size() == 0 || p.Calls <= 0 || p.Role != role || !sampled(p) {
			t.Errorf("profile %d %+v: %v", i, p, err)
		}
		if fi, err := os.Stat(profileBeside(p.File, "heap")); err != nil || fi.Size() == 0 {
			t.Errorf("profile %d: heap profile: %v", i, err)
		}
	}
	if c := rep.Profiles[5].Callers; c != 4 {
		t.Errorf("nats-server's second read-only profile at %d callers, want 4", c)
	}
	for _, want := range []string{"run 1", "run 2", "raw one_hop", "throughput_4", "router_cpu_write_us", "others' cores",
		"router process memory", "mcp-go HTTP", "vs_mcp_http_4", "worker CPU profile", "workers_8_vs_1", "parked path", "I/O-bound tool",
		"SDKs over raw nats.go at the same rate, 4 callers: read-only", "callers in step", "callers spread",
		"SDKs over raw nats.go at the same rate, 4 callers, per run"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
	for _, r := range rep.Runs {
		for role, pid := range r.PIDs {
			if !processGone(pid) {
				t.Errorf("run %d: %s process %d still runs", r.Run, role, pid)
			}
		}
	}
	// Everything Run started in this process has stopped (goroutines may
	// take a moment).
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			return fmt.Errorf("%d goroutines after Run, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
		}
		return nil
	})
}

// sampled reports whether p's samples were split by kind, where a sample
// was to be expected: the profiler samples 100 times per CPU second, so a
// process that used 25 ms over a short profile (a few calls on a loaded
// machine) often holds no sample at all; from 100 ms on (10 samples
// expected) an empty split is a fault.
func sampled(p Profile) bool {
	return len(p.Shares) > 0 || p.CPUUSPerCall*float64(p.Calls) < 100_000
}

// TestChildTrace: with TOOLBUS_BENCH_TRACE a child writes an execution
// trace of its life to <dir>/<role>.trace, and no control request starts
// one or names its file; a directory it cannot write to fails it before it
// serves.
func TestChildTrace(t *testing.T) {
	if trace.IsEnabled() {
		t.Skip("this process is traced already (-test.trace)")
	}
	s := testkit.RunServer(t)
	t.Setenv(envURL, s.ClientURL())
	for _, tc := range []struct {
		name    string
		dir     string
		wantErr bool
	}{
		{name: "written", dir: t.TempDir()},
		{name: "no such directory", dir: filepath.Join(t.TempDir(), "missing"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envTrace, tc.dir)
			stdinR, stdinW := io.Pipe()
			outR, outW := io.Pipe()
			done := make(chan error, 1)
			go func() { done <- runChild(roleRelay, stdinR, outW); outW.Close() }()
			sc := bufio.NewScanner(outR)
			if ready := sc.Scan() && strings.HasPrefix(sc.Text(), childReady); ready == tc.wantErr {
				t.Fatalf("ready line %q with the trace in %s", sc.Text(), tc.dir)
			}
			go func() { _, _ = io.Copy(io.Discard, outR) }()
			elsewhere := t.TempDir()
			if !tc.wantErr { // no control request starts a trace or names its file
				nc := testkit.ConnectURL(t, s.ClientURL())
				req := fmt.Sprintf(`{"trace": %q, "profile": %q}`, elsewhere, filepath.Join(elsewhere, "x"))
				if _, err := nc.Request(ctlSubject(roleRelay), []byte(req), 10*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			stdinW.Close() // the parent's signal to exit
			err := <-done
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), tc.dir) {
					t.Fatalf("runChild = %v, want an error naming %s", err, tc.dir)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if left, _ := os.ReadDir(elsewhere); len(left) > 0 {
				t.Fatalf("a control request wrote %s", left[0].Name())
			}
			b, err := os.ReadFile(filepath.Join(tc.dir, roleRelay+".trace"))
			if err != nil || !strings.HasPrefix(string(b), "go 1.") {
				t.Fatalf("trace file: %d bytes starting %q, err %v", len(b), b[:min(len(b), 16)], err)
			}
		})
	}
}
