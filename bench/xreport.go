package bench

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

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
	P50US      float64            `json:"p50_us"`
	P90US      float64            `json:"p90_us"`
	P99US      float64            `json:"p99_us"`
	Throughput map[string]float64 `json:"throughput"`
	// CPUUSPerCall is each process's CPU (getrusage of that process) per
	// call, by caller count then process: router (the router process, or
	// the relay forwarder's), worker (the worker process: the toolbus
	// worker, or the raw responder), client (the bench process: the
	// callers), nats (nats-server).
	CPUUSPerCall map[string]map[string]float64 `json:"cpu_us_per_call"`
	// AllocsPerCall is each process's heap allocations per call
	// (runtime.MemStats.Mallocs), keyed as CPUUSPerCall.
	AllocsPerCall map[string]map[string]float64 `json:"allocs_per_call"`
	// OtherCores is the CPU, in cores, that processes outside the
	// deployment used during each measurement (from /proc/stat): on a
	// machine to itself it is near 0, and the figures above are only as
	// good as it is small.
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
	Count         int     `json:"count"`
	Cached        int     `json:"cached"` // sessions in the router's cache afterwards
	RSSMiBBefore  float64 `json:"rss_mib_before"`
	RSSMiBAfter   float64 `json:"rss_mib_after"` // after a GC that returns freed memory
	PeakRSSMiB    float64 `json:"peak_rss_mib"`  // VmHWM over the process's life
	HeapMiBBefore float64 `json:"heap_mib_before"`
	HeapMiBAfter  float64 `json:"heap_mib_after"`
	NATSRSSMiB    float64 `json:"nats_rss_mib"`
	WriteS        float64 `json:"write_s"` // writing the sessions into KV
	ListS         float64 `json:"list_s"`  // listing each through the router
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
	Quick       bool    `json:"quick"`
	Runs        int     `json:"runs"`
	DurationMS  float64 `json:"duration_ms"`
	Callers     []int   `json:"callers"`
	CostCallers int     `json:"cost_callers"` // where the SDKs' CPU is judged
	Sessions    int     `json:"sessions"`
	Started     string  `json:"started"`
}

const crossLayout = "nats-server (embedded, its own process), router (its own process, cmd/router's defaults, no built-in tools), " +
	"relay forwarder (its own process), worker and raw responder (one process, each on its own connection), " +
	"mcp-go streamable HTTP server (its own process), callers in the bench process; every process re-executes the bench's binary"

func newCrossReport(o CrossOptions) *CrossReport {
	r := &CrossReport{Layout: crossLayout}
	r.Config = CrossConfig{Quick: o.Quick, Runs: o.Runs, DurationMS: float64(o.Duration.Microseconds()) / 1e3,
		Callers: o.Callers, CostCallers: nearest(o.Callers, 16), Sessions: o.Sessions,
		Started: time.Now().UTC().Format(time.RFC3339)}
	r.Machine = Machine{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), CPUModel: cpuModel(), LoadAvgStart: loadAvg(),
		Revision: revision()}
	return r
}

// crossTargets are issue 20's goals for the cross-process comparison.
func (r *CrossReport) crossTargets(run *CrossRun) []Target {
	top := strconv.Itoa(r.Config.Callers[len(r.Config.Callers)-1])
	mid := strconv.Itoa(r.Config.CostCallers)
	var out []Target
	t := func(name, what string, v float64, op string, limit float64) {
		met := v >= limit
		if op == "<=" {
			met = v <= limit
		}
		out = append(out, Target{Name: name, What: what, Value: v, Op: op, Limit: limit, Met: met})
	}
	t("throughput_"+top, "read-only / relay throughput, "+top+" callers", run.Ratios.VsRelay[top], ">=", 0.6)
	t("p50_1", "read-only / relay p50, one caller", run.Ratios.P50, "<=", 1.6)
	t("vs_mcp_http_"+mid, "read-only / one mcp-go streamable HTTP server process, "+mid+" callers", run.Ratios.VsMCP, ">=", 1.5)
	t("router_cpu_us", "router process CPU µs per read-only call, "+top+" callers", run.Toolbus.CPUUSPerCall[top][partRouter], "<=", 40)
	t("router_cpu_write_us", "router process CPU µs per write call, "+top+" callers", run.ToolbusWrite.CPUUSPerCall[top][partRouter], "<=", 70)
	t("worker_sdk_us", "worker process CPU µs per read-only call, "+mid+" callers", run.Toolbus.CPUUSPerCall[mid][partWorker], "<=", 15)
	t("client_sdk_us", "bench (client) process CPU µs per read-only call, "+mid+" callers", run.Toolbus.CPUUSPerCall[mid][partClient], "<=", 12)
	return out
}

// finish computes each run's ratios and targets and their spread.
func (r *CrossReport) finish() {
	top := strconv.Itoa(r.Config.Callers[len(r.Config.Callers)-1])
	mid := strconv.Itoa(r.Config.CostCallers)
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
		run.Targets = r.crossTargets(run)
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

// WriteTable prints the report: each run's figures, then the targets over
// the runs, the memory and the profiles.
func (r *CrossReport) WriteTable(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "toolbus bench --cross-process  %s  %s %s/%s  %d CPUs (GOMAXPROCS %d)  %s", r.Config.Started, m.GoVersion,
		m.OS, m.Arch, m.NumCPU, m.GOMAXPROCS, m.CPUModel)
	if m.Revision != "" {
		fmt.Fprintf(w, "  revision %s", m.Revision)
	}
	fmt.Fprintf(w, "\nload average %.2f at start, %.2f at end; %d runs on fresh processes, %v per measurement; took %.0f s\n",
		m.LoadAvgStart, m.LoadAvgEnd, r.Config.Runs, time.Duration(r.Config.DurationMS*float64(time.Millisecond)), r.ElapsedS)
	fmt.Fprintf(w, "processes: %s\n\n", r.Layout)
	top := strconv.Itoa(r.Config.Callers[len(r.Config.Callers)-1])
	mid := strconv.Itoa(r.Config.CostCallers)
	for _, run := range r.Runs {
		r.writeRun(w, &run, top, mid)
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

func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func (r *CrossReport) writeRun(w io.Writer, run *CrossRun, top, mid string) {
	fmt.Fprintf(w, "run %d (load average %.2f → %.2f)\n", run.Run, run.LoadAvgStart, run.LoadAvgEnd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "path\tp50 µs\tp99 µs\t"
	for _, n := range r.Config.Callers {
		head += fmt.Sprintf("%d callers/s\t", n)
	}
	head += fmt.Sprintf("router|fwd µs/call@%s\trouter|fwd allocs@%s\tworker µs@%s\tclient µs@%s\tnats µs@%s\tothers' cores@%s\t\n",
		top, top, mid, mid, top, top)
	fmt.Fprint(tw, head)
	for _, row := range []struct {
		name string
		p    *CrossPath
	}{{"relay", &run.Relay}, {"toolbus read-only", &run.Toolbus}, {"toolbus write (ledger)", &run.ToolbusWrite}} {
		line := fmt.Sprintf("%s\t%.0f\t%.0f\t", row.name, row.p.P50US, row.p.P99US)
		for _, n := range r.Config.Callers {
			line += fmt.Sprintf("%.0f\t", row.p.Throughput[strconv.Itoa(n)])
		}
		line += fmt.Sprintf("%.1f\t%.0f\t%.1f\t%.1f\t%.1f\t%.2f\t\n", row.p.CPUUSPerCall[top][partRouter], row.p.AllocsPerCall[top][partRouter],
			row.p.CPUUSPerCall[mid][partWorker], row.p.CPUUSPerCall[mid][partClient], row.p.CPUUSPerCall[top][procNATS], row.p.OtherCores[top])
		fmt.Fprint(tw, line)
	}
	if p := run.MCP; p.Throughput[mid] > 0 {
		line := fmt.Sprintf("mcp-go HTTP (router|fwd = its server)\t%.0f\t%.0f\t", p.P50US, p.P99US)
		for _, n := range r.Config.Callers {
			if k := strconv.Itoa(n); k == mid {
				line += fmt.Sprintf("%.0f\t", p.Throughput[k])
			} else {
				line += "-\t"
			}
		}
		line += fmt.Sprintf("%.1f@%s\t%.0f@%s\t-\t%.1f\t-\t%.2f@%s\t\n", p.CPUUSPerCall[mid][partRouter], mid, p.AllocsPerCall[mid][partRouter], mid,
			p.CPUUSPerCall[mid][partClient], p.OtherCores[mid], mid)
		fmt.Fprint(tw, line)
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
	var tg []string
	for _, t := range run.Targets {
		tg = append(tg, fmt.Sprintf("%s %s (%s %s, %s)", t.Name, num(t.Value), t.Op, num(t.Limit), metWord(t.Met)))
	}
	fmt.Fprintf(w, "targets: %s\n\n", strings.Join(tg, "; "))
}
