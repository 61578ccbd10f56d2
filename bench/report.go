package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
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

// Path is what is measured for one kind of call.
type Path struct {
	P50US      float64            `json:"p50_us"`
	P90US      float64            `json:"p90_us"`
	P99US      float64            `json:"p99_us"`
	Throughput map[string]float64 `json:"throughput"`
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
	Count               int     `json:"count"`
	Cached              int     `json:"cached"` // sessions in the router's cache afterwards
	HeapMiBBefore       float64 `json:"heap_mib_before"`
	HeapMiBAfter        float64 `json:"heap_mib_after"`
	RSSMiBBefore        float64 `json:"rss_mib_before"`
	RSSMiBAfter         float64 `json:"rss_mib_after"`
	HeapBytesPerSession float64 `json:"heap_bytes_per_session"`
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
	Rounds      int     `json:"rounds"`
	Callers     []int   `json:"callers"`
	Workers     []int   `json:"workers"`
	IOCallers   int     `json:"io_callers"`
	CostCallers int     `json:"cost_callers"`
	Sessions    int     `json:"sessions"`
	Started     string  `json:"started"`
}

func newReport(o Options, mid int) *Report {
	r := &Report{Workers: map[string]float64{}, Targets: []Target{}}
	for _, p := range []*Path{&r.Baseline.OneHop, &r.Baseline.Relay, &r.Toolbus, &r.ToolbusWrite} {
		p.Throughput = map[string]float64{}
	}
	r.Config = Config{Quick: o.Quick, DurationMS: float64(o.Duration.Microseconds()) / 1e3, Rounds: o.Rounds, Callers: o.Callers,
		Workers: o.Workers, IOCallers: ioCallers, CostCallers: mid, Sessions: o.Sessions,
		Started: time.Now().UTC().Format(time.RFC3339)}
	r.Machine = Machine{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), CPUModel: cpuModel(), LoadAvgStart: loadAvg(),
		Revision: revision()}
	return r
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// finish computes the ratios and checks the targets.
func (r *Report) finish() {
	top := strconv.Itoa(r.Config.Callers[len(r.Config.Callers)-1])
	mid := strconv.Itoa(r.Config.CostCallers)
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
	var issue string
	t := func(name, what string, v float64, op string, limit float64) {
		met := v >= limit
		if op == "<=" {
			met = v <= limit
		}
		r.Targets = append(r.Targets, Target{Name: name, What: what, Value: v, Op: op, Limit: limit, Met: met, Issue: issue})
	}
	// Issue 20's targets that this in-process run can judge (the router's
	// own cost and the relay ratios: RunCross).
	issue = "20"
	t("vs_mcp_http_"+mid, "toolbus / mcp-go streamable HTTP throughput, "+mid+" callers", r.Ratios.VsMCPHTTP16, ">=", 1.5)
	t("workers_8_vs_1", fmt.Sprintf("I/O-bound tool, %d vs %d workers", ws[len(ws)-1], ws[0]), r.Ratios.Workers8Vs1, ">=", 7)
	t("worker_sdk_us", "worker SDK CPU µs per read-only call (labels)", r.Toolbus.CPUByPartUS[partWorker], "<=", 15)
	t("client_sdk_us", "client SDK CPU µs per read-only call (labels)", r.Toolbus.CPUByPartUS[partClient], "<=", 12)
	t("router_rss_mib", fmt.Sprintf("RSS MiB, whole process, %d sessions in KV", r.Sessions.Count), r.Sessions.RSSMiBAfter, "<=", 150)
	// Issue 9's, for reference.
	issue = "9"
	t("router_cpu_us", "router CPU µs per read-only call (labels, "+mid+" callers)", r.Toolbus.RouterCPUUSPerCall, "<=", 35)
	t("router_cpu_write_us", "router CPU µs per write call (ledger)", r.ToolbusWrite.RouterCPUUSPerCall, "<=", 60)
	for _, n := range r.Config.Callers {
		k := strconv.Itoa(n)
		t("vs_bare_"+k, "toolbus/bare throughput, "+k+" callers", r.Ratios.VsBare[k], ">=", 0.75)
	}
	t("p50_vs_bare", "toolbus/bare p50, one caller", r.Ratios.P50VsBare, "<=", 1.3)
}

// WriteTable prints the report as readable tables, with the targets of
// issue 5 and whether each was met.
func (r *Report) WriteTable(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "toolbus bench  %s  %s %s/%s  %d CPUs (GOMAXPROCS %d)  %s", r.Config.Started, m.GoVersion, m.OS, m.Arch,
		m.NumCPU, m.GOMAXPROCS, m.CPUModel)
	if m.Revision != "" {
		fmt.Fprintf(w, "  revision %s", m.Revision)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "load average %.2f at start, %.2f at end; %v per measurement in %d rounds, best round counts; took %.0f s\n\n",
		m.LoadAvgStart, m.LoadAvgEnd, time.Duration(r.Config.DurationMS*float64(time.Millisecond)), r.Config.Rounds, r.ElapsedS)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "path\tp50 µs\tp90 µs\tp99 µs\t"
	for _, n := range r.Config.Callers {
		head += fmt.Sprintf("%d callers/s\t", n)
	}
	head += "CPU µs/call*\tallocs/call*\tcores*\t\n"
	fmt.Fprint(tw, head)
	for _, row := range []struct {
		name string
		p    *Path
	}{{"raw one_hop", &r.Baseline.OneHop}, {"raw relay", &r.Baseline.Relay},
		{"toolbus read-only", &r.Toolbus}, {"toolbus write (ledger)", &r.ToolbusWrite}} {
		line := fmt.Sprintf("%s\t%.0f\t%.0f\t%.0f\t", row.name, row.p.P50US, row.p.P90US, row.p.P99US)
		for _, n := range r.Config.Callers {
			line += fmt.Sprintf("%.0f\t", row.p.Throughput[strconv.Itoa(n)])
		}
		line += fmt.Sprintf("%.1f\t%.0f\t%.2f\t\n", row.p.CPUUSPerCall, row.p.AllocsPerCall, row.p.CoresUsed)
		fmt.Fprint(tw, line)
	}
	bareLine := fmt.Sprintf("bare (no router)\t%.0f\t\t\t", r.Bare.P50US)
	for _, n := range r.Config.Callers {
		bareLine += fmt.Sprintf("%.0f\t", r.Bare.Throughputs[strconv.Itoa(n)])
	}
	fmt.Fprintf(tw, "%s%.1f\t%.0f\t%.2f\t\n", bareLine, r.Bare.CPUUSPerCall, r.Bare.AllocsPerCall, r.Bare.CoresUsed)
	_ = tw.Flush()
	fmt.Fprintf(w, "* whole process (nats-server, client, worker, router) at %d callers; cores = the process's CPU use\n"+
		"  in that run (%d = CPU-bound with the machine to itself). bare = client and worker with a byte-forwarding\n"+
		"  stand-in for the router that publishes the same events and reply (router share = toolbus - bare).\n\n",
		r.Config.CostCallers, r.Machine.GOMAXPROCS)

	fmt.Fprintf(w, "CPU µs per call by part (%s, %d callers)\n", r.CPUMethod, r.Config.CostCallers)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "path\trouter/forwarder\tworker/responder\tclient\tother (nats-server, GC)\tone sample\t\n")
	for _, row := range []struct {
		name, key string
		parts     map[string]float64
	}{{"raw relay", "relay", r.Baseline.Relay.CPUByPartUS}, {"bare (no router)", "bare", r.Bare.CPUByPartUS},
		{"toolbus read-only", "toolbus", r.Toolbus.CPUByPartUS}, {"toolbus write", "toolbus_write", r.ToolbusWrite.CPUByPartUS}} {
		if row.parts == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t\n", row.name, row.parts[partRouter], row.parts[partWorker],
			row.parts[partClient], row.parts[partOther], r.ProfileSampleUS[row.key])
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

func num(v float64) string {
	switch {
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// memoryNow collects garbage, returns freed memory to the OS, and reports
// the heap in use and the resident set size in MiB.
func memoryNow() (heapMiB, rssMiB float64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / (1 << 20), float64(procStatusKB("VmRSS")) / 1024
}

// procStatusKB reads a kB field of /proc/self/status; 0 when unavailable.
func procStatusKB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// revision is the vcs revision stamped into the binary, if any.
func revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// machineBusy is the CPU time every process on the machine has used since
// boot (all of /proc/stat's first line but idle and iowait); 0 where there
// is no /proc/stat.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is already in user
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / clockTicks)
}

// clockTicks is USER_HZ, the unit of /proc/stat (100 on every Linux
// architecture Go supports).
const clockTicks = 100

func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
