package bench

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of Run; json.Marshal gives the form `toolbus bench
// --json` prints. Durations are in microseconds, throughputs in calls per
// second keyed by caller count.
type Report struct {
	// Layout says which part runs in which process.
	Layout  string      `json:"layout"`
	Runs    []RunResult `json:"runs"`
	Targets []Spread    `json:"targets"` // each target over the runs
	// Measured once, after the last run: the router process's memory with
	// many sessions in KV (nil when skipped), the parked path, the
	// I/O-bound tool (5 ms) by worker copies (each running one call at a
	// time, Config.IOCallers callers) and the optional CPU profiles.
	Sessions *Sessions          `json:"sessions,omitempty"`
	Parked   *Parked            `json:"parked,omitempty"`
	Workers  map[string]float64 `json:"workers,omitempty"`
	Profiles []Profile          `json:"profiles,omitempty"`
	Machine  Machine            `json:"machine"`
	Config   Config             `json:"config"`
	ElapsedS float64            `json:"elapsed_s"`
}

// RunResult is one run on fresh processes.
type RunResult struct {
	Run    int            `json:"run"`
	PIDs   map[string]int `json:"pids"`
	OneHop Path           `json:"one_hop"` // raw request → responder → reply, no forwarder
	Relay  Path           `json:"relay"`
	// Toolbus is a trivial read-only tool, ToolbusWrite a trivial
	// non-read-only one (the dedupe ledger records every call).
	Toolbus      Path `json:"toolbus"`
	ToolbusWrite Path `json:"toolbus_write"`
	// MCP is one mcp-go streamable HTTP server process serving the same
	// tool, one client (and session) per caller, at Config.CostCallers
	// callers only; its server process is "router" in CPUUSPerCall.
	MCP          Path     `json:"mcp_http"`
	OverRaw      OverRaw  `json:"sdk_over_raw"`
	Ratios       Ratios   `json:"ratios"`
	Targets      []Target `json:"targets"`
	LoadAvgStart float64  `json:"loadavg_start"`
	LoadAvgEnd   float64  `json:"loadavg_end"`
}

// Latency is one caller's latency percentiles and the throughput by
// caller count of one kind of call.
type Latency struct {
	P50US      float64            `json:"p50_us"`
	P90US      float64            `json:"p90_us"`
	P99US      float64            `json:"p99_us"`
	Throughput map[string]float64 `json:"throughput"`
}

// Path is one kind of call's figures in one run.
type Path struct {
	Latency
	// CPUUSPerCall is each process's CPU (getrusage) per call, by caller
	// count then process: router (or relay forwarder; none for one_hop),
	// worker (or raw responder), client (the callers), nats.
	CPUUSPerCall map[string]map[string]float64 `json:"cpu_us_per_call"`
	// AllocsPerCall is each process's heap allocations per call
	// (runtime.MemStats.Mallocs), keyed as CPUUSPerCall.
	AllocsPerCall map[string]map[string]float64 `json:"allocs_per_call"`
	// OtherCores is the CPU, in cores, of processes outside the deployment
	// during each measurement (/proc/stat): the figures are as good as it
	// is small.
	OtherCores map[string]float64 `json:"other_cores"`
}

// OverRaw is what the SDKs cost beyond raw nats.go at the same rate: right
// after the read-only calls at Config.CostCallers callers, one_hop (the raw
// requester in the bench process, the raw responder in its own) runs
// with as many callers, each paced to its share of the rate toolbus
// reached, the callers in step and then spread over each period (RawTwin).
// CPU per call falls as the rate rises and as calls arrive together (they
// share wakes and writes), so the SDK rows of Path compare unlike things
// with the raw paths' own rows; these compare like rates.
type OverRaw struct {
	Callers int     `json:"callers"`
	SDKRate float64 `json:"sdk_calls_per_s"` // the read-only calls' rate
	// The SDKs over their twins in step (InStep's), the raw pattern's
	// cheapest at that rate.
	WorkerOverRawUS float64 `json:"worker_over_raw_us"`
	ClientOverRawUS float64 `json:"client_over_raw_us"`
	InStep          RawTwin `json:"in_step"`
	Spread          RawTwin `json:"spread"`
}

// RawTwin is one_hop paced to the read-only calls' rate one way, and the
// pacing alone (its timer wakes are the bench process's, not the raw
// requester's); CPU µs per call.
type RawTwin struct {
	Rate     float64 `json:"calls_per_s"`
	WorkerUS float64 `json:"worker_us"` // the raw responder's process
	ClientUS float64 `json:"client_us"` // the bench process's, pacing included
	PacingUS float64 `json:"pacing_us"` // the bench process's, pacing alone
	// The worker process's CPU per read-only call minus WorkerUS, and the
	// bench process's minus ClientUS less PacingUS.
	WorkerOverUS float64 `json:"worker_over_us"`
	ClientOverUS float64 `json:"client_over_us"`
	OtherCores   float64 `json:"other_cores"` // Path.OtherCores during the paced calls
}

// Ratios compare the router's paths with the relay in one run.
type Ratios struct {
	VsRelay      map[string]float64 `json:"vs_relay"`       // read-only / relay throughput by caller count
	WriteVsRelay map[string]float64 `json:"write_vs_relay"` // write / relay throughput by caller count
	P50          float64            `json:"p50_1"`          // read-only p50 / relay p50, one caller
	P99          float64            `json:"p99_1"`
	WriteP50     float64            `json:"write_p50_1"`
	VsMCP        float64            `json:"vs_mcp_http"` // read-only / mcp-go throughput at Config.CostCallers
	// RouterVsForwarder is the router process's CPU per read-only call
	// over the forwarder's per relayed call, at the most callers.
	RouterVsForwarder float64 `json:"router_vs_forwarder_cpu"`
}

// Target is one goal and whether one run met it.
type Target struct {
	Name  string  `json:"name"`
	What  string  `json:"what"`
	Value float64 `json:"value"`
	Op    string  `json:"op"` // ">=" or "<="
	Limit float64 `json:"limit"`
	Met   bool    `json:"met"`
}

// Parked is the parked path, one call at a time: a call of an external
// tool parks, the agent answers, batch.done arrives.
type Parked struct {
	P50US             float64 `json:"p50_us"`
	P99US             float64 `json:"p99_us"`
	ParkP50US         float64 `json:"park_p50_us"`           // call → reply listing the call as parked
	AnswerToDoneP50US float64 `json:"answer_to_done_p50_us"` // answer → batch.done event
	Calls             int     `json:"calls"`
}

// Machine describes where the run happened.
type Machine struct {
	GoVersion    string  `json:"go_version"`
	OS           string  `json:"os"`
	Arch         string  `json:"arch"`
	NumCPU       int     `json:"num_cpu"`
	GOMAXPROCS   int     `json:"gomaxprocs"`
	CPUModel     string  `json:"cpu_model"`
	LoadAvgStart float64 `json:"loadavg_start"` // 1-minute load average; other work on the machine skews results
	LoadAvgEnd   float64 `json:"loadavg_end"`
	Revision     string  `json:"revision,omitempty"` // vcs revision of the binary, "+dirty" when modified
}

// Config echoes the options of the run.
type Config struct {
	Quick       bool    `json:"quick"`
	DurationMS  float64 `json:"duration_ms"`
	Callers     []int   `json:"callers"`
	CostCallers int     `json:"cost_callers"` // where the SDKs' CPU and mcp-go are judged
	Sessions    int     `json:"sessions"`
	Started     string  `json:"started"`
	Runs        int     `json:"runs"`
	Workers     []int   `json:"workers"`
	IOCallers   int     `json:"io_callers"`
}

// Spread is one target over the runs.
type Spread struct {
	Name   string    `json:"name"`
	What   string    `json:"what"`
	Op     string    `json:"op"`
	Limit  float64   `json:"limit"`
	Values []float64 `json:"values"` // per run
	Min    float64   `json:"min"`
	Median float64   `json:"median"`
	Max    float64   `json:"max"`
	Met    int       `json:"met"` // runs that met it
}

// Sessions is the router process's memory before and after sessions were
// written into KV and listed, after a GC that returns freed memory.
type Sessions struct {
	Count               int     `json:"count"`
	Cached              int     `json:"cached"` // sessions in the router's cache afterwards
	HeapMiBBefore       float64 `json:"heap_mib_before"`
	HeapMiBAfter        float64 `json:"heap_mib_after"`
	HeapBytesPerSession float64 `json:"heap_bytes_per_session"`
	RSSMiBBefore        float64 `json:"rss_mib_before"`
	RSSMiBAfter         float64 `json:"rss_mib_after"`
	PeakRSSMiB          float64 `json:"peak_rss_mib"` // VmHWM over the process's life
	NATSRSSMiB          float64 `json:"nats_rss_mib"`
	WriteS              float64 `json:"write_s"` // writing the sessions into KV
	ListS               float64 `json:"list_s"`  // listing each through the router
}

// Profile is one CPU profile of a process: what it covers, so that its
// samples can be turned into µs per call (seconds on the stack / calls).
type Profile struct {
	Role         string  `json:"role"` // the process profiled: router or worker
	File         string  `json:"file"`
	Callers      int     `json:"callers"`
	Calls        int64   `json:"calls"`
	Seconds      float64 `json:"seconds"`
	CPUUSPerCall float64 `json:"cpu_us_per_call"`  // the process's getrusage over the profile
	Shares       []Share `json:"shares,omitempty"` // the profile's samples by kind (SplitProfile)
}

const layout = "nats-server (embedded, its own process), router (its own process, cmd/router's defaults, no built-in tools), " +
	"relay forwarder, raw responder (Go's default collector) and worker (tuned as cmd/toolworker) (each its own process), " +
	"mcp-go streamable HTTP server (its own process), callers and the I/O-bound tool's workers in the bench process; " +
	"every process re-executes the bench's binary"

func newMachine() Machine {
	return Machine{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, NumCPU: runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), CPUModel: cpuModel(), LoadAvgStart: loadAvg(), Revision: revision()}
}

func newConfig(o Options, mid int) Config {
	return Config{Quick: o.Quick, DurationMS: float64(o.Duration.Microseconds()) / 1e3, Callers: o.Callers, CostCallers: mid,
		Sessions: o.Sessions, Started: time.Now().UTC().Format(time.RFC3339), Runs: o.Runs, Workers: o.Workers, IOCallers: ioCallers}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// targets collects targets and whether they were met.
type targets []Target

func (ts *targets) add(name, what string, v float64, op string, limit float64) {
	met := v >= limit
	if op == "<=" {
		met = v <= limit
	}
	*ts = append(*ts, Target{Name: name, What: what, Value: v, Op: op, Limit: limit, Met: met})
}

// finish computes each run's ratios and targets and their spread, and
// notes the end of the comparison that began at start.
func (r *Report) finish(start time.Time) {
	r.Machine.LoadAvgEnd, r.ElapsedS = loadAvg(), time.Since(start).Seconds()
	top, mid := strconv.Itoa(r.Config.Callers[len(r.Config.Callers)-1]), strconv.Itoa(r.Config.CostCallers)
	for i := range r.Runs {
		run := &r.Runs[i]
		run.Ratios = Ratios{VsRelay: map[string]float64{}, WriteVsRelay: map[string]float64{},
			P50: ratio(run.Toolbus.P50US, run.Relay.P50US), P99: ratio(run.Toolbus.P99US, run.Relay.P99US),
			WriteP50:          ratio(run.ToolbusWrite.P50US, run.Relay.P50US),
			VsMCP:             ratio(run.Toolbus.Throughput[mid], run.MCP.Throughput[mid]),
			RouterVsForwarder: ratio(run.Toolbus.CPUUSPerCall[top][partRouter], run.Relay.CPUUSPerCall[top][partRouter])}
		for _, n := range r.Config.Callers {
			k := strconv.Itoa(n)
			run.Ratios.VsRelay[k] = ratio(run.Toolbus.Throughput[k], run.Relay.Throughput[k])
			run.Ratios.WriteVsRelay[k] = ratio(run.ToolbusWrite.Throughput[k], run.Relay.Throughput[k])
		}
		// Issue 20's goals.
		var t targets
		t.add("throughput_"+top, "read-only / relay throughput, "+top+" callers", run.Ratios.VsRelay[top], ">=", 0.6)
		t.add("p50_1", "read-only / relay p50, one caller", run.Ratios.P50, "<=", 1.6)
		t.add("vs_mcp_http_"+mid, "read-only / one mcp-go streamable HTTP server process, "+mid+" callers", run.Ratios.VsMCP, ">=", 1.5)
		t.add("router_cpu_us", "router process CPU µs per read-only call, "+top+" callers", run.Toolbus.CPUUSPerCall[top][partRouter], "<=", 40)
		t.add("router_cpu_write_us", "router process CPU µs per write call, "+top+" callers", run.ToolbusWrite.CPUUSPerCall[top][partRouter], "<=", 70)
		t.add("worker_sdk_us", "worker process CPU µs per read-only call, "+mid+" callers", run.Toolbus.CPUUSPerCall[mid][partWorker], "<=", 15)
		t.add("client_sdk_us", "bench (client) process CPU µs per read-only call, "+mid+" callers", run.Toolbus.CPUUSPerCall[mid][partClient], "<=", 12)
		run.Targets = t
	}
	r.Targets = spreads(r.Runs)
	if ws := r.Config.Workers; len(r.Workers) > 0 {
		var t targets
		t.add("workers_8_vs_1", fmt.Sprintf("I/O-bound tool, %d vs %d workers (last run)", ws[len(ws)-1], ws[0]),
			ratio(r.Workers[strconv.Itoa(ws[len(ws)-1])], r.Workers[strconv.Itoa(ws[0])]), ">=", 7)
		r.Targets = append(r.Targets, spreadOf(t))
	}
}

// spreads gathers each target's values over the runs.
func spreads(runs []RunResult) []Spread {
	if len(runs) == 0 {
		return nil
	}
	out := make([]Spread, len(runs[0].Targets))
	for i := range out {
		var each []Target
		for _, run := range runs {
			each = append(each, run.Targets[i])
		}
		out[i] = spreadOf(each)
	}
	return out
}

// spreadOf is one target's values, one per run, as a Spread.
func spreadOf(each []Target) Spread {
	t := each[0]
	s := Spread{Name: t.Name, What: t.What, Op: t.Op, Limit: t.Limit}
	for _, v := range each {
		s.Values = append(s.Values, v.Value)
		if v.Met {
			s.Met++
		}
	}
	sorted := slices.Sorted(slices.Values(s.Values))
	s.Min, s.Max, s.Median = sorted[0], sorted[len(sorted)-1], sorted[len(sorted)/2]
	return s
}

// WriteTable prints the report: each run's figures, then the targets over
// the runs and what was measured once.
func (r *Report) WriteTable(w io.Writer) {
	c, m := r.Config, r.Machine
	fmt.Fprintf(w, "toolbus bench  %s  %s %s/%s  %d CPUs (GOMAXPROCS %d)  %s", c.Started, m.GoVersion, m.OS, m.Arch,
		m.NumCPU, m.GOMAXPROCS, m.CPUModel)
	if m.Revision != "" {
		fmt.Fprintf(w, "  revision %s", m.Revision)
	}
	fmt.Fprintf(w, "\nload average %.2f at start, %.2f at end; %d runs on fresh processes, %v per measurement; took %.0f s\n",
		m.LoadAvgStart, m.LoadAvgEnd, c.Runs, time.Duration(c.DurationMS*float64(time.Millisecond)), r.ElapsedS)
	fmt.Fprintf(w, "processes: %s\n\n", r.Layout)
	for _, run := range r.Runs {
		r.writeRun(w, &run)
	}
	fmt.Fprintf(w, "targets (issue 20), over %d runs\n", len(r.Runs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "  target\twhat\tper run\tgoal\tmet\n")
	for _, s := range r.Targets {
		vals := make([]string, len(s.Values))
		for i, v := range s.Values {
			vals[i] = num(v)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s %s\t%d/%d\n", s.Name, s.What, strings.Join(vals, " / "), s.Op, num(s.Limit), s.Met, len(s.Values))
	}
	_ = tw.Flush()
	var wo, co []string
	for _, run := range r.Runs {
		wo, co = append(wo, num(run.OverRaw.WorkerOverRawUS)), append(co, num(run.OverRaw.ClientOverRawUS))
	}
	fmt.Fprintf(w, "SDKs over raw nats.go at the same rate, %d callers, per run: worker %s µs; client %s µs\n\n", c.CostCallers,
		strings.Join(wo, " / "), strings.Join(co, " / "))
	if p := r.Parked; p != nil {
		fmt.Fprintf(w, "parked path (call parks → answer → batch.done), %d calls: p50 %.0f µs, p99 %.0f µs (park %.0f µs, answer → done %.0f µs)\n",
			p.Calls, p.P50US, p.P99US, p.ParkP50US, p.AnswerToDoneP50US)
	}
	if len(r.Workers) > 0 {
		fmt.Fprintf(w, "I/O-bound tool (5 ms), %d callers, workers limited to one call at a time:", c.IOCallers)
		for _, n := range c.Workers {
			fmt.Fprintf(w, "  %d: %.0f/s", n, r.Workers[strconv.Itoa(n)])
		}
		fmt.Fprintln(w)
	}
	if s := r.Sessions; s != nil {
		fmt.Fprintf(w, "router process memory, %d sessions written into KV and listed once each (router caches %d): RSS %.1f MiB "+
			"after GC (%.1f before), peak %.1f MiB; heap %.1f MiB (%.1f before), %.0f bytes per session; nats-server RSS %.1f MiB; "+
			"goal RSS <= 150 MiB: %s\n", s.Count, s.Cached, s.RSSMiBAfter, s.RSSMiBBefore, s.PeakRSSMiB, s.HeapMiBAfter, s.HeapMiBBefore,
			s.HeapBytesPerSession, s.NATSRSSMiB, metWord(s.PeakRSSMiB <= 150))
	}
	for _, p := range r.Profiles {
		fmt.Fprintf(w, "%s CPU profile: %s, %d calls from %d callers in %.1f s, %.1f µs per call (go tool pprof -top %s)\n",
			p.Role, p.File, p.Calls, p.Callers, p.Seconds, p.CPUUSPerCall, p.File)
		for _, sh := range p.Shares {
			fmt.Fprintf(w, "  %6.1f µs  %4.1f%%  %s\n", sh.USPerCall, sh.Percent, sh.Kind)
		}
	}
}

func (r *Report) writeRun(w io.Writer, run *RunResult) {
	top, mid := strconv.Itoa(r.Config.Callers[len(r.Config.Callers)-1]), strconv.Itoa(r.Config.CostCallers)
	fmt.Fprintf(w, "run %d (load average %.2f → %.2f)\n", run.Run, run.LoadAvgStart, run.LoadAvgEnd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "path\tp50 µs\tp90 µs\tp99 µs\t")
	for _, n := range r.Config.Callers {
		fmt.Fprintf(tw, "%d callers/s\t", n)
	}
	fmt.Fprintf(tw, "router|fwd µs/call@%s\trouter|fwd allocs@%s\tworker µs@%s\tclient µs@%s\tnats µs@%s\tothers' cores@%s\t\n",
		top, top, mid, mid, top, top)
	for _, row := range []struct {
		name string
		p    *Path
	}{{"raw one_hop", &run.OneHop}, {"relay", &run.Relay}, {"toolbus read-only", &run.Toolbus},
		{"toolbus write (ledger)", &run.ToolbusWrite}, {"mcp-go HTTP (router|fwd = its server)", &run.MCP}} {
		p := row.p
		if p.Throughput[mid] == 0 {
			continue // mcp-go was not measured
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t", row.name, p.P50US, p.P90US, p.P99US)
		for _, n := range r.Config.Callers {
			if v, ok := p.Throughput[strconv.Itoa(n)]; ok {
				fmt.Fprintf(tw, "%.0f\t", v)
			} else {
				fmt.Fprint(tw, "-\t")
			}
		}
		cpu, allocs := p.CPUUSPerCall, p.AllocsPerCall
		switch p {
		case &run.MCP: // at the mid caller count only, with no worker of ours
			fmt.Fprintf(tw, "%.1f@%s\t%.0f@%s\t-\t%.1f\t-\t%.2f@%s\t\n", cpu[mid][partRouter], mid, allocs[mid][partRouter], mid,
				cpu[mid][partClient], p.OtherCores[mid], mid)
			continue
		case &run.OneHop: // no forwarder
			fmt.Fprint(tw, "-\t-\t")
		default:
			fmt.Fprintf(tw, "%.1f\t%.0f\t", cpu[top][partRouter], allocs[top][partRouter])
		}
		fmt.Fprintf(tw, "%.1f\t%.1f\t%.1f\t%.2f\t\n", cpu[mid][partWorker], cpu[mid][partClient], cpu[top][procNATS], p.OtherCores[top])
	}
	_ = tw.Flush()
	var vs, wvs []string
	for _, n := range r.Config.Callers {
		k := strconv.Itoa(n)
		vs = append(vs, fmt.Sprintf("%s: %.2f", k, run.Ratios.VsRelay[k]))
		wvs = append(wvs, fmt.Sprintf("%s: %.2f", k, run.Ratios.WriteVsRelay[k]))
	}
	fmt.Fprintf(w, "ratios vs relay: read-only throughput %s; p50 %.2f, p99 %.2f; write throughput %s; write p50 %.2f;\n"+
		"  router CPU per read-only call %.1f× the forwarder's per relayed call; read-only / mcp-go throughput at %s callers %.2f\n",
		strings.Join(vs, "  "), run.Ratios.P50, run.Ratios.P99, strings.Join(wvs, "  "), run.Ratios.WriteP50, run.Ratios.RouterVsForwarder,
		mid, run.Ratios.VsMCP)
	o := run.OverRaw
	fmt.Fprintf(w, "SDKs over raw nats.go at the same rate, %d callers: read-only %.0f calls/s, worker %.1f µs, client %.1f µs; one_hop paced to it\n",
		o.Callers, o.SDKRate, o.InStep.WorkerUS+o.InStep.WorkerOverUS, o.InStep.ClientUS-o.InStep.PacingUS+o.InStep.ClientOverUS)
	for i, t := range []RawTwin{o.InStep, o.Spread} {
		fmt.Fprintf(w, "  callers %-7s %.0f/s: raw responder %.1f, worker over it %.1f µs; raw requester %.1f less pacing %.1f, client over it %.1f µs; "+
			"others' cores %.2f\n", [...]string{"in step", "spread"}[i], t.Rate, t.WorkerUS, t.WorkerOverUS, t.ClientUS, t.PacingUS, t.ClientOverUS, t.OtherCores)
	}
	var tg []string
	for _, t := range run.Targets {
		tg = append(tg, fmt.Sprintf("%s %s (%s %s, %s)", t.Name, num(t.Value), t.Op, num(t.Limit), metWord(t.Met)))
	}
	fmt.Fprintf(w, "targets: %s\n\n", strings.Join(tg, "; "))
}

func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func num(v float64) string {
	switch {
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
