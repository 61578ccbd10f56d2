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

// Report is the outcome of Run. json.Marshal gives the form `toolbus bench
// --json` prints; every duration is in microseconds, every throughput in
// calls per second, keyed by the number of concurrent callers.
type Report struct {
	Baseline     Baseline `json:"baseline"`
	Toolbus      Path     `json:"toolbus"`       // trivial read-only tool
	ToolbusWrite Path     `json:"toolbus_write"` // trivial non-read-only tool (dedupe ledger)
	// Bare is the toolbus path with a byte-forwarding stand-in for the
	// router: the client's, the worker's and the server's cost of a call.
	Bare Cost `json:"bare"`
	// CPUMethod says how CPUByPartUS and router_cpu_us_per_call were found.
	CPUMethod string `json:"cpu_method"`
	// ProfileSampleUS is, per path profiled (relay, bare, toolbus,
	// toolbus_write), what one profile sample (10 ms) is per call: the
	// step in which that path's CPUByPartUS figures move.
	ProfileSampleUS map[string]float64 `json:"profile_sample_us,omitempty"`

	// Workers is the throughput of an I/O-bound tool (5 ms) by worker copies,
	// each running one call at a time, with 64 callers.
	Workers map[string]float64 `json:"workers"`

	ParkedP50US float64 `json:"parked_p50_us"`
	Parked      Parked  `json:"parked"`

	// MCPHTTP16 is the throughput of mcp-go's streamable HTTP server with
	// MCPHTTPCallers (16 by default) callers, each its own client and session.
	MCPHTTP16      float64 `json:"mcp_http_16"`
	MCPHTTPCallers int     `json:"mcp_http_callers"`
	MCPHTTPP50US   float64 `json:"mcp_http_p50_us"`
	MCPProtocol    string  `json:"mcp_protocol"` // the revision mcp-go negotiated by default

	Ratios  Ratios   `json:"ratios"`
	Targets []Target `json:"targets"`

	// Memory after creating Sessions.Count sessions (10,000 by default),
	// after a GC, of the whole process (router, nats-server, client, workers).
	RouterRSSMiB10k  float64       `json:"router_rss_mib_10k_sessions"`
	RouterHeapMiB10k float64       `json:"router_heap_mib_10k_sessions"`
	Sessions         SessionMemory `json:"sessions"`

	Machine  Machine `json:"machine"`
	Config   Config  `json:"config"`
	ElapsedS float64 `json:"elapsed_s"`
}

// Baseline holds the raw core NATS request/reply measurements.
type Baseline struct {
	OneHop Path `json:"one_hop"`
	Relay  Path `json:"relay"`
}

// Latency is one caller's latency percentiles and the throughput by
// caller count of one kind of call.
type Latency struct {
	P50US      float64            `json:"p50_us"`
	P90US      float64            `json:"p90_us"`
	P99US      float64            `json:"p99_us"`
	Throughput map[string]float64 `json:"throughput"`
}

// Path is what is measured for one kind of call.
type Path struct {
	Latency
	// CPUUSPerCall and AllocsPerCall are process-wide (nats-server, client,
	// worker and router are all in this process), per call, at the
	// Config.CostCallers caller count.
	CPUUSPerCall  float64 `json:"cpu_us_per_call"`
	AllocsPerCall float64 `json:"allocs_per_call"`
	// CoresUsed is the process's CPU use during that run, in cores: near
	// GOMAXPROCS when the path is CPU-bound and nothing else competed for
	// the machine.
	CoresUsed float64 `json:"cores_used"`
	// CPUByPartUS splits CPU per call by goroutine label: router (or the raw
	// forwarder), worker (or the raw responder), client, other (nats-server,
	// GC, the runtime).
	CPUByPartUS map[string]float64 `json:"cpu_by_part_us,omitempty"`
	// Router estimates, toolbus paths only: CPU from the router's labelled
	// samples (or the subtraction when profiling was unavailable); CPU and
	// allocations as this path minus the bare path.
	RouterCPUUSPerCall           float64 `json:"router_cpu_us_per_call,omitempty"`
	RouterCPUUSPerCallSubtracted float64 `json:"router_cpu_us_per_call_subtracted,omitempty"`
	RouterAllocsPerCall          float64 `json:"router_allocs_per_call,omitempty"`
}

// Cost is the bare path: its cost per call (at the mid caller count), its
// one-caller p50 and its throughput by caller count.
type Cost struct {
	CPUUSPerCall  float64            `json:"cpu_us_per_call"`
	AllocsPerCall float64            `json:"allocs_per_call"`
	CoresUsed     float64            `json:"cores_used"`
	Throughput    float64            `json:"throughput"` // at the mid caller count
	CPUByPartUS   map[string]float64 `json:"cpu_by_part_us,omitempty"`
	P50US         float64            `json:"p50_us"`
	Throughputs   map[string]float64 `json:"throughputs"` // by caller count
}

// Parked is the parked path: a call of an external tool parks, the agent
// answers, batch.done arrives.
type Parked struct {
	P50US             float64 `json:"p50_us"`
	P99US             float64 `json:"p99_us"`
	ParkP50US         float64 `json:"park_p50_us"`           // call → reply listing the call as parked
	AnswerToDoneP50US float64 `json:"answer_to_done_p50_us"` // answer → batch.done event
	Calls             int     `json:"calls"`
}

// Ratios compare toolbus with relay, bare (the protocol floor) and mcp-go,
// and worker scaling.
type Ratios struct {
	VsBare             map[string]float64 `json:"vs_bare"`              // toolbus / bare throughput by caller count
	P50VsBare          float64            `json:"p50_vs_bare"`          // toolbus p50 / bare p50, one caller
	Throughput256      float64            `json:"throughput_256"`       // toolbus / relay, most callers
	P50One             float64            `json:"p50_1"`                // toolbus p50 / relay p50, one caller
	VsMCPHTTP16        float64            `json:"vs_mcp_http_16"`       // toolbus / mcp-go throughput, 16 callers
	Workers8Vs1        float64            `json:"workers_8_vs_1"`       // most / fewest worker copies
	WriteThroughput256 float64            `json:"write_throughput_256"` // toolbus_write / relay, most callers
	WriteP50One        float64            `json:"write_p50_1"`          // toolbus_write p50 / relay p50
}

// Target is one goal of issue 5 and whether this run met it.
type Target struct {
	Name  string  `json:"name"`
	What  string  `json:"what"`
	Value float64 `json:"value"`
	Op    string  `json:"op"` // ">=" or "<="
	Limit float64 `json:"limit"`
	Met   bool    `json:"met"`
	Issue string  `json:"issue,omitempty"` // the issue that set it
}

// SessionMemory is the memory measurement.
type SessionMemory struct {
	Memory
	HeapBytesPerSession float64 `json:"heap_bytes_per_session"`
}

// Memory is the router's memory (in process: the whole process's) before
// and after sessions were written and listed, after a GC that returns
// freed memory.
type Memory struct {
	Count         int     `json:"count"`
	Cached        int     `json:"cached"` // sessions in the router's cache afterwards
	HeapMiBBefore float64 `json:"heap_mib_before"`
	HeapMiBAfter  float64 `json:"heap_mib_after"`
	RSSMiBBefore  float64 `json:"rss_mib_before"`
	RSSMiBAfter   float64 `json:"rss_mib_after"`
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
	Setup
	Rounds    int   `json:"rounds"`
	Workers   []int `json:"workers"`
	IOCallers int   `json:"io_callers"`
}

// Setup is what both benches echo of their options.
type Setup struct {
	Quick       bool    `json:"quick"`
	DurationMS  float64 `json:"duration_ms"`
	Callers     []int   `json:"callers"`
	CostCallers int     `json:"cost_callers"` // where CPU per call (in process) and the SDKs' CPU are judged
	Sessions    int     `json:"sessions"`
	Started     string  `json:"started"`
}

// CrossReport is the outcome of RunCross; json.Marshal gives the form
// `toolbus bench --cross-process --json` prints. Durations are in
// microseconds, throughputs in calls per second keyed by caller count.
type CrossReport struct {
	// Layout says which part runs in which process.
	Layout  string     `json:"layout"`
	Runs    []CrossRun `json:"runs"`
	Targets []Spread   `json:"targets"` // each target over the runs
	// Sessions is the router process's memory with many sessions in KV,
	// measured after the last run (nil when skipped).
	Sessions *CrossSessions `json:"sessions,omitempty"`
	Profiles []Profile      `json:"profiles,omitempty"` // CPU profiles of the router process
	Machine  Machine        `json:"machine"`
	Config   CrossConfig    `json:"config"`
	ElapsedS float64        `json:"elapsed_s"`
}

// CrossRun is one run on fresh processes.
type CrossRun struct {
	Run          int            `json:"run"`
	PIDs         map[string]int `json:"pids"`
	Relay        CrossPath      `json:"relay"`
	Toolbus      CrossPath      `json:"toolbus"`       // trivial read-only tool
	ToolbusWrite CrossPath      `json:"toolbus_write"` // trivial non-read-only tool (dedupe ledger)
	// MCP is one mcp-go streamable HTTP server process serving the same
	// tool, one client (and session) per caller, at Config.CostCallers
	// callers only; its server process is "router" in CPUUSPerCall.
	MCP          CrossPath   `json:"mcp_http"`
	Ratios       CrossRatios `json:"ratios"`
	Targets      []Target    `json:"targets"`
	LoadAvgStart float64     `json:"loadavg_start"`
	LoadAvgEnd   float64     `json:"loadavg_end"`
}

// CrossPath is one path's figures in one run.
type CrossPath struct {
	Latency
	// CPUUSPerCall is each process's CPU (getrusage) per call, by caller
	// count then process: router (or relay forwarder), worker (or raw
	// responder), client (the callers), nats.
	CPUUSPerCall map[string]map[string]float64 `json:"cpu_us_per_call"`
	// AllocsPerCall is each process's heap allocations per call
	// (runtime.MemStats.Mallocs), keyed as CPUUSPerCall.
	AllocsPerCall map[string]map[string]float64 `json:"allocs_per_call"`
	// OtherCores is the CPU, in cores, of processes outside the deployment
	// during each measurement (/proc/stat): the figures are as good as it
	// is small.
	OtherCores map[string]float64 `json:"other_cores"`
}

// CrossRatios compare the router's paths with the relay in one run.
type CrossRatios struct {
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

// CrossSessions is the router process's memory with many sessions in KV.
type CrossSessions struct {
	Memory
	PeakRSSMiB float64 `json:"peak_rss_mib"` // VmHWM over the process's life
	NATSRSSMiB float64 `json:"nats_rss_mib"`
	WriteS     float64 `json:"write_s"` // writing the sessions into KV
	ListS      float64 `json:"list_s"`  // listing each through the router
}

// Profile is one CPU profile of the router process: what it covers, so
// that its samples can be turned into µs per call (seconds on the stack /
// calls).
type Profile struct {
	Role         string  `json:"role"` // the process profiled: router or worker
	File         string  `json:"file"`
	Callers      int     `json:"callers"`
	Calls        int64   `json:"calls"`
	Seconds      float64 `json:"seconds"`
	CPUUSPerCall float64 `json:"cpu_us_per_call"`  // the process's getrusage over the profile
	Shares       []Share `json:"shares,omitempty"` // the profile's samples by kind (SplitProfile)
}

// CrossConfig echoes the options of the run.
type CrossConfig struct {
	Setup
	Runs int `json:"runs"`
}

const crossLayout = "nats-server (embedded, its own process), router (its own process, cmd/router's defaults, no built-in tools), " +
	"relay forwarder (its own process), worker and raw responder (one process, each on its own connection), " +
	"mcp-go streamable HTTP server (its own process), callers in the bench process; every process re-executes the bench's binary"

func newMachine() Machine {
	return Machine{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, NumCPU: runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), CPUModel: cpuModel(), LoadAvgStart: loadAvg(), Revision: revision()}
}

func newSetup(o Options, mid int) Setup {
	return Setup{Quick: o.Quick, DurationMS: float64(o.Duration.Microseconds()) / 1e3, Callers: o.Callers, CostCallers: mid,
		Sessions: o.Sessions, Started: time.Now().UTC().Format(time.RFC3339)}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// targets collects targets and whether they were met.
type targets struct {
	list  []Target
	issue string // the issue that set the next ones
}

func (ts *targets) add(name, what string, v float64, op string, limit float64) {
	met := v >= limit
	if op == "<=" {
		met = v <= limit
	}
	ts.list = append(ts.list, Target{Name: name, What: what, Value: v, Op: op, Limit: limit, Met: met, Issue: ts.issue})
}

// finish computes the ratios and checks the targets, and notes the end
// of a run that began at start.
func (r *Report) finish(start time.Time) {
	r.Machine.LoadAvgEnd, r.ElapsedS = loadAvg(), time.Since(start).Seconds()
	top, mid := strconv.Itoa(r.Config.Callers[len(r.Config.Callers)-1]), strconv.Itoa(r.Config.CostCallers)
	ws := r.Config.Workers
	r.Ratios = Ratios{
		Throughput256:      ratio(r.Toolbus.Throughput[top], r.Baseline.Relay.Throughput[top]),
		P50One:             ratio(r.Toolbus.P50US, r.Baseline.Relay.P50US),
		VsMCPHTTP16:        ratio(r.Toolbus.Throughput[mid], r.MCPHTTP16),
		Workers8Vs1:        ratio(r.Workers[strconv.Itoa(ws[len(ws)-1])], r.Workers[strconv.Itoa(ws[0])]),
		WriteThroughput256: ratio(r.ToolbusWrite.Throughput[top], r.Baseline.Relay.Throughput[top]),
		WriteP50One:        ratio(r.ToolbusWrite.P50US, r.Baseline.Relay.P50US),
		VsBare:             map[string]float64{},
		P50VsBare:          ratio(r.Toolbus.P50US, r.Bare.P50US),
	}
	for _, n := range r.Config.Callers {
		k := strconv.Itoa(n)
		r.Ratios.VsBare[k] = ratio(r.Toolbus.Throughput[k], r.Bare.Throughputs[k])
	}
	// Issue 20's targets that this in-process run can judge (the router's
	// own cost and the relay ratios: RunCross).
	t := targets{list: []Target{}, issue: "20"}
	t.add("vs_mcp_http_"+mid, "toolbus / mcp-go streamable HTTP throughput, "+mid+" callers", r.Ratios.VsMCPHTTP16, ">=", 1.5)
	t.add("workers_8_vs_1", fmt.Sprintf("I/O-bound tool, %d vs %d workers", ws[len(ws)-1], ws[0]), r.Ratios.Workers8Vs1, ">=", 7)
	t.add("worker_sdk_us", "worker SDK CPU µs per read-only call (labels)", r.Toolbus.CPUByPartUS[partWorker], "<=", 15)
	t.add("client_sdk_us", "client SDK CPU µs per read-only call (labels)", r.Toolbus.CPUByPartUS[partClient], "<=", 12)
	t.add("router_rss_mib", fmt.Sprintf("RSS MiB, whole process, %d sessions in KV", r.Sessions.Count), r.Sessions.RSSMiBAfter, "<=", 150)
	// Issue 9's, for reference.
	t.issue = "9"
	t.add("router_cpu_us", "router CPU µs per read-only call (labels, "+mid+" callers)", r.Toolbus.RouterCPUUSPerCall, "<=", 35)
	t.add("router_cpu_write_us", "router CPU µs per write call (ledger)", r.ToolbusWrite.RouterCPUUSPerCall, "<=", 60)
	for _, n := range r.Config.Callers {
		k := strconv.Itoa(n)
		t.add("vs_bare_"+k, "toolbus/bare throughput, "+k+" callers", r.Ratios.VsBare[k], ">=", 0.75)
	}
	t.add("p50_vs_bare", "toolbus/bare p50, one caller", r.Ratios.P50VsBare, "<=", 1.3)
	r.Targets = t.list
}

// finish computes each run's ratios and targets and their spread, and
// notes the end of the comparison that began at start.
func (r *CrossReport) finish(start time.Time) {
	r.Machine.LoadAvgEnd, r.ElapsedS = loadAvg(), time.Since(start).Seconds()
	top, mid := strconv.Itoa(r.Config.Callers[len(r.Config.Callers)-1]), strconv.Itoa(r.Config.CostCallers)
	for i := range r.Runs {
		run := &r.Runs[i]
		run.Ratios = CrossRatios{VsRelay: map[string]float64{}, WriteVsRelay: map[string]float64{},
			P50: ratio(run.Toolbus.P50US, run.Relay.P50US), P99: ratio(run.Toolbus.P99US, run.Relay.P99US),
			WriteP50:          ratio(run.ToolbusWrite.P50US, run.Relay.P50US),
			VsMCP:             ratio(run.Toolbus.Throughput[mid], run.MCP.Throughput[mid]),
			RouterVsForwarder: ratio(run.Toolbus.CPUUSPerCall[top][partRouter], run.Relay.CPUUSPerCall[top][partRouter])}
		for _, n := range r.Config.Callers {
			k := strconv.Itoa(n)
			run.Ratios.VsRelay[k] = ratio(run.Toolbus.Throughput[k], run.Relay.Throughput[k])
			run.Ratios.WriteVsRelay[k] = ratio(run.ToolbusWrite.Throughput[k], run.Relay.Throughput[k])
		}
		// The goals of the cross-process comparison.
		var t targets
		t.add("throughput_"+top, "read-only / relay throughput, "+top+" callers", run.Ratios.VsRelay[top], ">=", 0.6)
		t.add("p50_1", "read-only / relay p50, one caller", run.Ratios.P50, "<=", 1.6)
		t.add("vs_mcp_http_"+mid, "read-only / one mcp-go streamable HTTP server process, "+mid+" callers", run.Ratios.VsMCP, ">=", 1.5)
		t.add("router_cpu_us", "router process CPU µs per read-only call, "+top+" callers", run.Toolbus.CPUUSPerCall[top][partRouter], "<=", 40)
		t.add("router_cpu_write_us", "router process CPU µs per write call, "+top+" callers", run.ToolbusWrite.CPUUSPerCall[top][partRouter], "<=", 70)
		t.add("worker_sdk_us", "worker process CPU µs per read-only call, "+mid+" callers", run.Toolbus.CPUUSPerCall[mid][partWorker], "<=", 15)
		t.add("client_sdk_us", "bench (client) process CPU µs per read-only call, "+mid+" callers", run.Toolbus.CPUUSPerCall[mid][partClient], "<=", 12)
		run.Targets = t.list
	}
	r.Targets = spreads(r.Runs)
}

// spreads gathers each target's values over the runs.
func spreads(runs []CrossRun) []Spread {
	if len(runs) == 0 {
		return nil
	}
	out := make([]Spread, len(runs[0].Targets))
	for i, t := range runs[0].Targets {
		s := Spread{Name: t.Name, What: t.What, Op: t.Op, Limit: t.Limit}
		for _, run := range runs {
			v := run.Targets[i]
			s.Values = append(s.Values, v.Value)
			if v.Met {
				s.Met++
			}
		}
		sorted := slices.Sorted(slices.Values(s.Values))
		s.Min, s.Max, s.Median = sorted[0], sorted[len(sorted)-1], sorted[len(sorted)/2]
		out[i] = s
	}
	return out
}

// writeHead prints the first lines of a report: the title, when, the
// machine, its load and how the run went (runs).
func writeHead(w io.Writer, title string, c Setup, m Machine, runs string, elapsed float64) {
	fmt.Fprintf(w, "%s  %s  %s %s/%s  %d CPUs (GOMAXPROCS %d)  %s", title, c.Started, m.GoVersion, m.OS, m.Arch,
		m.NumCPU, m.GOMAXPROCS, m.CPUModel)
	if m.Revision != "" {
		fmt.Fprintf(w, "  revision %s", m.Revision)
	}
	fmt.Fprintf(w, "\nload average %.2f at start, %.2f at end; %s; took %.0f s\n", m.LoadAvgStart, m.LoadAvgEnd, runs, elapsed)
}

func (s Setup) duration() time.Duration {
	return time.Duration(s.DurationMS * float64(time.Millisecond))
}

// pathTable prints one row per path: its name, the figures before, its
// throughput at each caller count, and the figures after ("-" for a
// throughput it does not have).
func pathTable(w io.Writer, head string, callers []int, rows []tableRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "path\t"+head[:strings.Index(head, "|")])
	for _, n := range callers {
		fmt.Fprintf(tw, "%d callers/s\t", n)
	}
	fmt.Fprint(tw, head[strings.Index(head, "|")+1:]+"\n")
	for _, r := range rows {
		fmt.Fprint(tw, r.name+"\t"+r.before)
		for _, n := range callers {
			if v, ok := r.throughput[strconv.Itoa(n)]; ok {
				fmt.Fprintf(tw, "%.0f\t", v)
			} else {
				fmt.Fprint(tw, "-\t")
			}
		}
		fmt.Fprint(tw, r.after+"\n")
	}
	_ = tw.Flush()
}

type tableRow struct {
	name, before string
	throughput   map[string]float64
	after        string
}

// WriteTable prints the report as readable tables, with the targets and
// whether each was met.
func (r *Report) WriteTable(w io.Writer) {
	writeHead(w, "toolbus bench", r.Config.Setup, r.Machine,
		fmt.Sprintf("%v per measurement in %d rounds, best round counts", r.Config.duration(), r.Config.Rounds), r.ElapsedS)
	fmt.Fprintln(w)
	var rows []tableRow
	for _, row := range []struct {
		name string
		p    *Path
	}{{"raw one_hop", &r.Baseline.OneHop}, {"raw relay", &r.Baseline.Relay},
		{"toolbus read-only", &r.Toolbus}, {"toolbus write (ledger)", &r.ToolbusWrite}} {
		rows = append(rows, tableRow{row.name, fmt.Sprintf("%.0f\t%.0f\t%.0f\t", row.p.P50US, row.p.P90US, row.p.P99US), row.p.Throughput,
			fmt.Sprintf("%.1f\t%.0f\t%.2f\t", row.p.CPUUSPerCall, row.p.AllocsPerCall, row.p.CoresUsed)})
	}
	rows = append(rows, tableRow{"bare (no router)", fmt.Sprintf("%.0f\t\t\t", r.Bare.P50US), r.Bare.Throughputs,
		fmt.Sprintf("%.1f\t%.0f\t%.2f\t", r.Bare.CPUUSPerCall, r.Bare.AllocsPerCall, r.Bare.CoresUsed)})
	pathTable(w, "p50 µs\tp90 µs\tp99 µs\t|CPU µs/call*\tallocs/call*\tcores*\t", r.Config.Callers, rows)
	fmt.Fprintf(w, "* whole process (nats-server, client, worker, router) at %d callers; cores = the process's CPU use\n"+
		"  in that run (%d = CPU-bound with the machine to itself). bare = client and worker with a byte-forwarding\n"+
		"  stand-in for the router that publishes the same events and reply (router share = toolbus - bare).\n\n",
		r.Config.CostCallers, r.Machine.GOMAXPROCS)

	fmt.Fprintf(w, "CPU µs per call by part (%s, %d callers)\n", r.CPUMethod, r.Config.CostCallers)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "path\trouter/forwarder\tworker/responder\tclient\tother (nats-server, GC)\tone sample\t\n")
	for _, row := range []struct {
		name, key string
		parts     map[string]float64
	}{{"raw relay", "relay", r.Baseline.Relay.CPUByPartUS}, {"bare (no router)", "bare", r.Bare.CPUByPartUS},
		{"toolbus read-only", "toolbus", r.Toolbus.CPUByPartUS}, {"toolbus write", "toolbus_write", r.ToolbusWrite.CPUByPartUS}} {
		if row.parts != nil {
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t\n", row.name, row.parts[partRouter], row.parts[partWorker],
				row.parts[partClient], row.parts[partOther], r.ProfileSampleUS[row.key])
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "router share per call: read-only CPU %.1f µs (labels) / %.1f µs (toolbus - bare), %.0f allocs (toolbus - bare);\n"+
		"                        write     CPU %.1f µs (labels) / %.1f µs (toolbus - bare), %.0f allocs (toolbus - bare)\n\n",
		r.Toolbus.RouterCPUUSPerCall, r.Toolbus.RouterCPUUSPerCallSubtracted, r.Toolbus.RouterAllocsPerCall,
		r.ToolbusWrite.RouterCPUUSPerCall, r.ToolbusWrite.RouterCPUUSPerCallSubtracted, r.ToolbusWrite.RouterAllocsPerCall)

	fmt.Fprintf(w, "I/O-bound tool (5 ms), %d callers, workers limited to one call at a time:", r.Config.IOCallers)
	for _, n := range r.Config.Workers {
		fmt.Fprintf(w, "  %d: %.0f/s", n, r.Workers[strconv.Itoa(n)])
	}
	fmt.Fprintf(w, "\nparked path (call parks → answer → batch.done), %d calls: p50 %.0f µs, p99 %.0f µs (park %.0f µs, answer → done %.0f µs)\n",
		r.Parked.Calls, r.Parked.P50US, r.Parked.P99US, r.Parked.ParkP50US, r.Parked.AnswerToDoneP50US)
	fmt.Fprintf(w, "mcp-go streamable HTTP (protocol %s), %d callers: %.0f calls/s (one caller p50 %.0f µs)\n",
		r.MCPProtocol, r.MCPHTTPCallers, r.MCPHTTP16, r.MCPHTTPP50US)
	s := r.Sessions
	fmt.Fprintf(w, "memory, whole process, %d sessions (router caches %d): heap %.1f MiB (%.1f before), RSS %.1f MiB (%.1f before), %.0f heap bytes/session\n\n",
		s.Count, s.Cached, s.HeapMiBAfter, s.HeapMiBBefore, s.RSSMiBAfter, s.RSSMiBBefore, s.HeapBytesPerSession)

	fmt.Fprintln(w, "targets in this run (issue 20's router cost and relay ratios: toolbus bench --cross-process)")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	last := ""
	for _, t := range r.Targets {
		if t.Issue != last {
			_ = tw.Flush()
			last = t.Issue
			head := "  issue " + t.Issue
			if t.Issue == "9" {
				head += " (for reference; ratios against bare, the protocol floor)"
			}
			fmt.Fprintln(w, head)
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%s %s\t%s\n", t.Name, t.What, num(t.Value), t.Op, num(t.Limit), metWord(t.Met))
	}
	_ = tw.Flush()
}

// WriteTable prints the report: each run's figures, then the targets over
// the runs, the memory and the profiles.
func (r *CrossReport) WriteTable(w io.Writer) {
	writeHead(w, "toolbus bench --cross-process", r.Config.Setup, r.Machine,
		fmt.Sprintf("%d runs on fresh processes, %v per measurement", r.Config.Runs, r.Config.duration()), r.ElapsedS)
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
	if s := r.Sessions; s != nil {
		fmt.Fprintf(w, "\nrouter process memory, %d sessions written into KV and listed once each (router caches %d): RSS %.1f MiB "+
			"after GC (%.1f before), peak %.1f MiB; heap %.1f MiB (%.1f before); nats-server RSS %.1f MiB; goal RSS <= 150 MiB: %s\n",
			s.Count, s.Cached, s.RSSMiBAfter, s.RSSMiBBefore, s.PeakRSSMiB, s.HeapMiBAfter, s.HeapMiBBefore, s.NATSRSSMiB,
			metWord(s.PeakRSSMiB <= 150))
	}
	for _, p := range r.Profiles {
		fmt.Fprintf(w, "%s CPU profile: %s, %d calls from %d callers in %.1f s, %.1f µs per call (go tool pprof -top %s)\n",
			p.Role, p.File, p.Calls, p.Callers, p.Seconds, p.CPUUSPerCall, p.File)
		for _, sh := range p.Shares {
			fmt.Fprintf(w, "  %6.1f µs  %4.1f%%  %s\n", sh.USPerCall, sh.Percent, sh.Kind)
		}
	}
}

func (r *CrossReport) writeRun(w io.Writer, run *CrossRun) {
	top, mid := strconv.Itoa(r.Config.Callers[len(r.Config.Callers)-1]), strconv.Itoa(r.Config.CostCallers)
	fmt.Fprintf(w, "run %d (load average %.2f → %.2f)\n", run.Run, run.LoadAvgStart, run.LoadAvgEnd)
	var rows []tableRow
	for _, row := range []struct {
		name string
		p    *CrossPath
	}{{"relay", &run.Relay}, {"toolbus read-only", &run.Toolbus}, {"toolbus write (ledger)", &run.ToolbusWrite}} {
		p := row.p
		rows = append(rows, tableRow{row.name, fmt.Sprintf("%.0f\t%.0f\t", p.P50US, p.P99US), p.Throughput,
			fmt.Sprintf("%.1f\t%.0f\t%.1f\t%.1f\t%.1f\t%.2f\t", p.CPUUSPerCall[top][partRouter], p.AllocsPerCall[top][partRouter],
				p.CPUUSPerCall[mid][partWorker], p.CPUUSPerCall[mid][partClient], p.CPUUSPerCall[top][procNATS], p.OtherCores[top])})
	}
	if p := run.MCP; p.Throughput[mid] > 0 {
		rows = append(rows, tableRow{"mcp-go HTTP (router|fwd = its server)", fmt.Sprintf("%.0f\t%.0f\t", p.P50US, p.P99US), p.Throughput,
			fmt.Sprintf("%.1f@%s\t%.0f@%s\t-\t%.1f\t-\t%.2f@%s\t", p.CPUUSPerCall[mid][partRouter], mid, p.AllocsPerCall[mid][partRouter], mid,
				p.CPUUSPerCall[mid][partClient], p.OtherCores[mid], mid)})
	}
	pathTable(w, fmt.Sprintf("p50 µs\tp99 µs\t|router|fwd µs/call@%s\trouter|fwd allocs@%s\tworker µs@%s\tclient µs@%s\tnats µs@%s\tothers' cores@%s\t",
		top, top, mid, mid, top, top), r.Config.Callers, rows)
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
