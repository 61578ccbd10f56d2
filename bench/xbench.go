package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
)

// CrossOptions configure RunCross. Every zero value has a default.
type CrossOptions struct {
	// Quick shortens the run: Duration 1 s and 10,000 sessions unless set.
	Quick bool
	// Runs is how many times the whole comparison runs, each on a fresh
	// set of processes; zero means 3.
	Runs int
	// Duration is the length of each measurement; zero means 3 s (1 s
	// when Quick).
	Duration time.Duration
	// Callers are the caller counts of the throughput measurements; nil
	// means 1, 16, 256. The router's CPU targets are judged at the most,
	// the SDKs' at the count nearest 16.
	Callers []int
	// Sessions is how many sessions the memory measurement writes into KV
	// after the last run; zero means 100,000 (10,000 when Quick), negative
	// skips it.
	Sessions int
	// CPUProfile, when set, is the file the router process writes a CPU
	// profile of read-only calls at the most callers to, after the last
	// run, over ProfileWindow; the write calls' profile goes next to it
	// (".write" before the extension).
	CPUProfile string
	// ProfileWindow is the length of each CPU profile; zero means three
	// Durations, and at least 10 s.
	ProfileWindow time.Duration
	// Exe is the binary run as each part (it must call RunChild first in
	// main); "" means this process's own executable.
	Exe string
	// ChildStderr receives the processes' logs; nil keeps only the last
	// lines, for error messages.
	ChildStderr io.Writer
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

func (o *CrossOptions) defaults() error {
	if o.Runs <= 0 {
		o.Runs = 3
	}
	if o.Duration <= 0 {
		o.Duration = 3 * time.Second
		if o.Quick {
			o.Duration = time.Second
		}
	}
	if len(o.Callers) == 0 {
		o.Callers = []int{1, 16, 256}
	}
	o.Callers = sortedPositive(o.Callers)
	if o.Sessions == 0 {
		o.Sessions = 100000
		if o.Quick {
			o.Sessions = 10000
		}
	}
	if o.ProfileWindow <= 0 {
		o.ProfileWindow = max(3*o.Duration, minCrossProfile)
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: cross-process: %w", err)
		}
		o.Exe = exe
	}
	return nil
}

// writeProfile names the write calls' profile next to file.
func writeProfile(file string) string { return profileBeside(file, "write") }

// workerProfile names the worker process's profile (read-only calls) next
// to file.
func workerProfile(file string) string { return profileBeside(file, "worker") }

// profileBeside is file with .kind before its extension.
func profileBeside(file, kind string) string {
	if i := strings.LastIndex(file, "."); i > strings.LastIndex(file, "/") {
		return file[:i] + "." + kind + file[i:]
	}
	return file + "." + kind
}

// RunCross runs the cross-process comparison Options.Runs times, each on
// fresh processes: one caller's latency and the throughput at each caller
// count of the raw relay and of read-only and write calls through the
// router, with each process's CPU and the router's allocations per call;
// then, on the last run's processes, the optional CPU profiles and the
// router process's memory with Sessions sessions in KV.
func RunCross(ctx context.Context, opts CrossOptions) (*CrossReport, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	rep := newCrossReport(opts)
	for i := range opts.Runs {
		last := i == opts.Runs-1
		run, err := crossRun(ctx, &opts, rep, i+1, last)
		if err != nil {
			return nil, err
		}
		rep.Runs = append(rep.Runs, run)
	}
	rep.finish()
	rep.Machine.LoadAvgEnd = loadAvg()
	rep.ElapsedS = time.Since(start).Seconds()
	return rep, nil
}

// crossRun is one run on fresh processes; the last one also profiles and
// measures memory.
func crossRun(ctx context.Context, opts *CrossOptions, rep *CrossReport, n int, last bool) (CrossRun, error) {
	logf := opts.Logf
	top := opts.Callers[len(opts.Callers)-1]
	run := CrossRun{Run: n, LoadAvgStart: loadAvg()}
	logf("bench: run %d: starting nats-server, router, relay forwarder and worker processes", n)
	mid := nearest(opts.Callers, 16)
	var profiles map[string][]string
	if opts.CPUProfile != "" && last {
		profiles = map[string][]string{
			roleRouter: {opts.CPUProfile, writeProfile(opts.CPUProfile)},
			roleWorker: {workerProfile(opts.CPUProfile)},
		}
	}
	d, err := xdeploy(ctx, xconfig{exe: opts.Exe, sessions: top, mcpClients: mid, profiles: profiles, stderr: opts.ChildStderr})
	if err != nil {
		return run, err
	}
	defer d.close(ctx)
	fail := func(err error) (CrossRun, error) {
		if s := d.childErrors(); s != "" {
			err = fmt.Errorf("%w\n%s", err, s)
		}
		return run, err
	}
	run.PIDs = map[string]int{}
	for role, c := range d.children {
		run.PIDs[role] = c.pid()
	}
	// server is the process that stands between caller and worker (or,
	// for mcp-go, serves the tool itself); mcp-go runs at mid callers only.
	paths := []struct {
		name, server string
		fn           callFunc
		out          *CrossPath
		midOnly      bool
	}{
		{"relay", roleRelay, d.relay, &run.Relay, false},
		{"toolbus read-only", roleRouter, d.callTool(toolRead), &run.Toolbus, false},
		{"toolbus write", roleRouter, d.callTool(toolWrite), &run.ToolbusWrite, false},
		{"mcp-go HTTP", roleMCP, d.mcp.call, &run.MCP, true},
	}
	for _, p := range paths {
		*p.out = CrossPath{Throughput: map[string]float64{}, CPUUSPerCall: map[string]map[string]float64{},
			AllocsPerCall: map[string]map[string]float64{}, OtherCores: map[string]float64{}}
		if _, err := runLoad(ctx, max(opts.Duration/4, minSlice), 16, p.fn); err != nil {
			return fail(fmt.Errorf("bench: warm-up %s: %w", p.name, err))
		}
	}
	logf("bench: run %d: latency, one caller, %v each", n, opts.Duration)
	for _, p := range paths {
		lat, err := measureLatency(ctx, opts.Duration, p.fn)
		if err != nil {
			return fail(fmt.Errorf("bench: latency %s: %w", p.name, err))
		}
		p.out.P50US, p.out.P90US, p.out.P99US = us(lat.quantile(0.5)), us(lat.quantile(0.9)), us(lat.quantile(0.99))
	}
	for _, c := range opts.Callers {
		logf("bench: run %d: throughput, %d callers, %v each", n, c, opts.Duration)
		k := strconv.Itoa(c)
		for _, p := range paths {
			if p.midOnly && c != mid {
				continue
			}
			l, diff, err := d.measureLoad(ctx, opts.Duration, c, p.fn)
			if err != nil {
				return fail(fmt.Errorf("bench: throughput %s: %w", p.name, err))
			}
			p.out.Throughput[k] = l.throughput()
			cpu, allocs := map[string]float64{}, map[string]float64{}
			for part, role := range map[string]string{partRouter: p.server, partWorker: roleWorker, partClient: roleClient, procNATS: roleNATS} {
				cpu[part] = perCallOf(float64(diff[role].CPUNS)/1e3, l.total)
				allocs[part] = perCallOf(float64(diff[role].Mallocs), l.total)
			}
			p.out.CPUUSPerCall[k], p.out.AllocsPerCall[k] = cpu, allocs
			p.out.OtherCores[k] = otherCores(diff, l.wall)
		}
	}
	run.LoadAvgEnd = loadAvg()
	if !last {
		return run, nil
	}
	if opts.CPUProfile != "" {
		for _, p := range []struct {
			files map[string]string
			fn    callFunc
		}{
			{map[string]string{roleRouter: opts.CPUProfile, roleWorker: workerProfile(opts.CPUProfile)}, paths[1].fn},
			{map[string]string{roleRouter: writeProfile(opts.CPUProfile)}, paths[2].fn},
		} {
			window := opts.ProfileWindow
			logf("bench: CPU profiles, %d callers, %v: %v", top, window, p.files)
			profs, err := d.profile(ctx, p.files, window, top, p.fn)
			if err != nil {
				return fail(fmt.Errorf("bench: profile: %w", err))
			}
			rep.Profiles = append(rep.Profiles, profs...)
		}
	}
	if opts.Sessions > 0 {
		logf("bench: router process memory with %d sessions in KV", opts.Sessions)
		if rep.Sessions, err = d.measureSessions(ctx, opts.Sessions); err != nil {
			return fail(err)
		}
	}
	return run, nil
}

// otherCores is the CPU that processes other than the deployment's used
// during a measurement, in cores: what competed with it for the machine.
func otherCores(diff snapshot, wall time.Duration) float64 {
	if wall <= 0 || diff[roleMachine].CPUNS <= 0 {
		return 0
	}
	ours := int64(0)
	for role, st := range diff {
		if role != roleMachine {
			ours += st.CPUNS
		}
	}
	return max(0, float64(diff[roleMachine].CPUNS-ours)/float64(wall.Nanoseconds()))
}

// minCrossProfile is the shortest window of the router's CPU profiles:
// at 100 samples a second, enough samples to rank the costs.
const minCrossProfile = 10 * time.Second

// procNATS names the nats-server process's share in CPUUSPerCall.
const procNATS = "nats"

func perCallOf(v float64, calls int64) float64 {
	if calls <= 0 {
		return 0
	}
	return v / float64(calls)
}

// measureSessions writes n sessions with the bench group active straight
// into the sessions bucket, lists each through the router (which reads and
// caches it up to its bound), waits for the router's status to count them,
// and reads the router process's memory before and after (after a GC that
// returns freed memory to the OS, and its peak).
func (d *xdeployment) measureSessions(ctx context.Context, n int) (*CrossSessions, error) {
	out := &CrossSessions{Count: n}
	before, err := d.stats(ctx, roleRouter, ctlRequest{GC: true})
	if err != nil {
		return nil, err
	}
	st0, err := d.status(ctx)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(d.ctl)
	if err != nil {
		return nil, fmt.Errorf("bench: sessions: %w", err)
	}
	kv, err := js.KeyValue(ctx, bus.NewSubjects("").Bucket(bus.BucketSessions))
	if err != nil {
		return nil, fmt.Errorf("bench: sessions: %w", err)
	}
	rec, err := json.Marshal(groups.Session{Active: []string{benchGroup}, Updated: time.Now().UTC()})
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		_, err := kv.Put(ctx, "mem-"+strconv.Itoa(i), rec)
		return err
	}); err != nil {
		return nil, fmt.Errorf("bench: sessions: %w", err)
	}
	out.WriteS = time.Since(t0).Seconds()
	t0 = time.Now()
	if err := parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		_, err := d.client.Tools(ctx, "mem-"+strconv.Itoa(i), "", nil)
		return err
	}); err != nil {
		return nil, fmt.Errorf("bench: sessions: listing: %w", err)
	}
	out.ListS = time.Since(t0).Seconds()
	want := min(st0.Sessions+n, groups.DefaultSessionCache)
	err = d.pollStatus(ctx, func(st bus.Status) error {
		out.Cached = st.Sessions
		if st.Sessions < want {
			return fmt.Errorf("%d sessions cached, want %d", st.Sessions, want)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: sessions: %w", err)
	}
	after, err := d.stats(ctx, roleRouter, ctlRequest{GC: true})
	if err != nil {
		return nil, err
	}
	nats, err := d.stats(ctx, roleNATS, ctlRequest{})
	if err != nil {
		return nil, err
	}
	out.RSSMiBBefore, out.RSSMiBAfter, out.PeakRSSMiB = kib(before.RSSKB), kib(after.RSSKB), kib(after.HWMKB)
	out.HeapMiBBefore, out.HeapMiBAfter = mib(before.HeapInuse), mib(after.HeapInuse)
	out.NATSRSSMiB = kib(nats.RSSKB)
	return out, nil
}

func kib(kb int64) float64 { return float64(kb) / 1024 }
func mib(b uint64) float64 { return float64(b) / (1 << 20) }
