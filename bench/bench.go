// Package bench measures toolbus against the physical limit of its design,
// raw core NATS request/reply (one_hop, and relay: the four messages a
// routed call needs), and against mcp-go's streamable HTTP server
// (docs/performance.md). Run deploys nats-server, the router, the relay
// forwarder, the worker and mcp-go each in a process of its own, every one
// reading its own CPU and allocations; one loop (measure) measures every
// path. The same deployment description (deploy) also runs in this process
// for the Go benchmarks, each part under its goroutine label.
package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/groups"
)

// Options configure Run. Every zero value has a default.
type Options struct {
	// Quick shortens the run: Duration 1 s and 10,000 sessions, unless set.
	Quick bool
	// Duration is the length of each measurement; zero means 3 s.
	Duration time.Duration
	// Callers are the concurrent caller counts of the throughput
	// measurements; nil means 1, 16, 256. The SDKs' costs (and mcp-go's
	// callers) are taken at the count nearest 16, the router's at the most.
	Callers []int
	// Workers are the worker copy counts of the I/O-bound tool; nil means
	// 1, 2, 4, 8.
	Workers []int
	// Sessions is how many sessions the memory measurement creates; zero
	// means 100,000 (see Quick); negative skips it.
	Sessions int
	// Runs is how many times the whole comparison runs, each on a fresh
	// set of processes; zero means 3.
	Runs int
	// CPUProfile, when set, is the file the router process writes a CPU
	// profile of read-only calls at the most callers to, after the last
	// run; ".write", ".worker", ".nats", ".nats-<mid callers>",
	// ".worker-<mid>", ".client-<mid>" and ".nats-relay" before the
	// extension name the others (nats-server's during read-only calls at the
	// most and mid callers, the SDKs' at mid callers, and relayed ones),
	// and each adds a heap profile at its end (".heap").
	CPUProfile string
	// ProfileWindow is the length of each CPU profile; zero means three
	// Durations, at least 10 s.
	ProfileWindow time.Duration
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

const (
	ioCallers  = 64                     // the caller count of the I/O-bound tool measurement
	minProfile = 10 * time.Second       // the shortest CPU profile of the router process
	minSlice   = 100 * time.Millisecond // the shortest warm-up
)

func (o *Options) defaults() {
	if o.Duration <= 0 {
		o.Duration = 3 * time.Second
		if o.Quick {
			o.Duration = time.Second
		}
	}
	if len(o.Callers) == 0 {
		o.Callers = []int{1, 16, 256}
	}
	if len(o.Workers) == 0 {
		o.Workers = []int{1, 2, 4, 8}
	}
	o.Callers, o.Workers = sortedPositive(o.Callers), sortedPositive(o.Workers)
	if o.Sessions == 0 {
		o.Sessions = 100000
		if o.Quick {
			o.Sessions = 10000
		}
	}
	o.Runs = cmp.Or(max(o.Runs, 0), 3)
	o.ProfileWindow = cmp.Or(max(o.ProfileWindow, 0), max(3*o.Duration, minProfile))
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

func sortedPositive(in []int) []int {
	out := slices.DeleteFunc(slices.Clone(in), func(n int) bool { return n <= 0 })
	slices.Sort(out)
	return slices.Compact(out)
}

// nearest returns the element of xs nearest to want.
func nearest(xs []int, want int) int {
	dist := func(x int) int { return max(x-want, want-x) }
	return slices.MinFunc(xs, func(a, b int) int { return cmp.Compare(dist(a), dist(b)) })
}

// Run runs the comparison Options.Runs times on fresh processes (latency
// and throughput of one_hop, the relay, read-only and write calls and
// mcp-go, with each process's CPU and allocations per call); then, on the
// last run's, the optional profiles, the parked path, the I/O-bound tool
// on more and more workers and the router's memory.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts.defaults()
	// Every part re-executes this binary, whose main calls RunChild first.
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	start := time.Now()
	rep := &Report{Layout: layout, Machine: newMachine(), Config: newConfig(opts, nearest(opts.Callers, 16))}
	for i := range opts.Runs {
		run, err := runOnce(ctx, &opts, exe, rep, i+1, i == opts.Runs-1)
		if err != nil {
			return nil, err
		}
		rep.Runs = append(rep.Runs, run)
	}
	rep.finish(start)
	return rep, nil
}

// runOnce is one run on fresh processes; the last one also measures what
// is measured once.
func runOnce(ctx context.Context, opts *Options, exe string, rep *Report, n int, last bool) (RunResult, error) {
	top, mid := opts.Callers[len(opts.Callers)-1], nearest(opts.Callers, 16)
	run := RunResult{Run: n, LoadAvgStart: loadAvg(), PIDs: map[string]int{}}
	opts.Logf("bench: run %d: starting nats-server, router, relay forwarder and worker processes", n)
	// After the last run: the router's, the worker's and nats-server's
	// profiles during read-only calls, the router's during write calls, and
	// nats-server's during read-only calls at mid callers and the relay's.
	var profileRuns []profileSpec
	profiles := map[string][]string{}
	if f := opts.CPUProfile; f != "" && last {
		profileRuns = []profileSpec{{2, top, map[string]string{roleRouter: f, roleWorker: profileBeside(f, "worker"), roleNATS: profileBeside(f, "nats")}},
			{3, top, map[string]string{roleRouter: profileBeside(f, "write")}},
			{2, mid, map[string]string{roleNATS: profileBeside(f, "nats-"+strconv.Itoa(mid)),
				roleWorker: profileBeside(f, "worker-"+strconv.Itoa(mid)), roleClient: profileBeside(f, "client-"+strconv.Itoa(mid))}},
			{1, top, map[string]string{roleNATS: profileBeside(f, "nats-relay")}}}
		for _, r := range profileRuns {
			for role, f := range r.files {
				profiles[role] = append(profiles[role], f)
			}
		}
	}
	d, err := deploy(ctx, config{exe: exe, sessions: top, mcpClients: mid, profiles: profiles})
	if err != nil {
		return run, err
	}
	defer d.close(ctx)
	fail := func(err error) (RunResult, error) {
		if s := d.childErrors(); s != "" {
			err = fmt.Errorf("%w\n%s", err, s)
		}
		return run, err
	}
	for role, c := range d.children {
		run.PIDs[role] = c.Pid()
	}
	paths := []*path{
		{name: "one_hop", worker: roleResponder, fn: d.raw(rawEcho)},
		{name: "relay", server: roleRelay, worker: roleResponder, fn: d.raw(rawRelay)},
		{name: "toolbus read-only", server: roleRouter, fn: d.callTool(toolRead)},
		{name: "toolbus write", server: roleRouter, fn: d.callTool(toolWrite)},
		{name: "mcp-go HTTP", server: roleMCP, fn: d.mcp.call, midOnly: true},
	}
	paths[2].twin = paths[0] // the SDKs' raw twins: one_hop at the read-only calls' rate
	if err := d.measure(ctx, paths, opts.Callers, mid, opts.Duration, opts.Logf); err != nil {
		return fail(err)
	}
	for i, out := range []*Path{&run.OneHop, &run.Relay, &run.Toolbus, &run.ToolbusWrite, &run.MCP} {
		*out = paths[i].figures()
	}
	run.OverRaw = paths[2].overRaw(mid)
	run.LoadAvgEnd = loadAvg()
	if !last {
		return run, nil
	}
	for _, r := range profileRuns {
		opts.Logf("bench: CPU profiles, %s, %d callers, %v: %v", paths[r.path].name, r.callers, opts.ProfileWindow, r.files)
		profs, err := profileRun(ctx, d, r.files, opts.ProfileWindow, r.callers, paths[r.path].fn)
		if err != nil {
			return fail(fmt.Errorf("bench: profile: %w", err))
		}
		rep.Profiles = append(rep.Profiles, profs...)
	}
	opts.Logf("bench: parked path, %v", opts.Duration)
	if rep.Parked, err = measureParked(ctx, d, opts.Duration); err != nil {
		return fail(err)
	}
	if rep.Workers, err = measureWorkers(ctx, d, opts.Workers, opts.Duration, opts.Logf); err != nil {
		return fail(err)
	}
	if opts.Sessions > 0 {
		opts.Logf("bench: router process memory with %d sessions in KV", opts.Sessions)
		if rep.Sessions, err = measureSessions(ctx, d, opts.Sessions); err != nil {
			return fail(err)
		}
	}
	return run, nil
}

// procNATS names the nats-server process's share in CPUUSPerCall.
const procNATS = "nats"

// profileSpec is one profiled load: paths[path] from callers callers, each
// role's process writing its profile to its file.
type profileSpec struct {
	path, callers int
	files         map[string]string
}

// profileBeside is file with .kind before its extension.
func profileBeside(file, kind string) string {
	ext := filepath.Ext(file)
	return strings.TrimSuffix(file, ext) + "." + kind + ext
}

// profileRun runs a load while each role's process writes a CPU profile to
// its file, and returns the calls made and each process's CPU over them.
func profileRun(ctx context.Context, d *deployment, files map[string]string, dur time.Duration, callers int, fn callFunc) ([]Profile, error) {
	roles := slices.Sorted(maps.Keys(files))
	before := map[string]childStats{}
	for _, role := range roles {
		st, err := d.stats(ctx, role, ctlRequest{Profile: new(files[role])})
		if err != nil {
			return nil, err
		}
		before[role] = st
	}
	l, lerr := runLoad(ctx, dur, callers, fn)
	errs := []error{lerr}
	var out []Profile
	for _, role := range roles {
		after, err := d.stats(ctx, role, ctlRequest{Profile: new("")}) // stops the profile
		p := Profile{Role: role, File: files[role], Callers: callers, Calls: l.Total, Seconds: l.Wall.Seconds(),
			CPUUSPerCall: perCallOf(float64(after.CPUNS-before[role].CPUNS)/1e3, l.Total)}
		if err == nil {
			p.Shares, err = SplitProfile(p.File, l.Total)
		}
		errs = append(errs, err)
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// measureParked measures the parked path one call at a time: a call of an
// external tool parks, the agent answers it, and batch.done arrives.
func measureParked(ctx context.Context, d *deployment, dur time.Duration) (*Parked, error) {
	const session = "bench-parked"
	out := &Parked{}
	ev, err := d.client.Watch(ctx, session)
	if err != nil {
		return nil, fmt.Errorf("bench: parked: %w", err)
	}
	defer ev.Stop(ctx)
	var total, park, answer Latencies
	err = repeat(ctx, dur, func(ctx context.Context) error {
		t0 := time.Now()
		t1, err := parkAndAnswer(ctx, d, ev, session)
		t2 := time.Now()
		total, park, answer = append(total, t2.Sub(t0)), append(park, t1.Sub(t0)), append(answer, t2.Sub(t1))
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, l := range []Latencies{total, park, answer} {
		slices.Sort(l)
	}
	out.P50US, out.P99US = us(total.Quantile(0.5)), us(total.Quantile(0.99))
	out.ParkP50US, out.AnswerToDoneP50US = us(park.Quantile(0.5)), us(answer.Quantile(0.5))
	out.Calls = len(total)
	return out, nil
}

// parkAndAnswer calls the external tool in session, answers it once it
// parks and waits for batch.done on ev; it returns when the call parked.
func parkAndAnswer(ctx context.Context, d *deployment, ev *client.Events, session string) (parked time.Time, err error) {
	id := client.NewReplyID()
	reply, err := d.client.Call(ctx, session, bus.Batch{Calls: []bus.Call{{ID: "c1", Name: toolParked, Input: benchInput}}},
		client.WithReplyID(id))
	if err != nil {
		return parked, fmt.Errorf("bench: parked call: %w", err)
	}
	if len(reply.Parked) != 1 || reply.Parked[0].Kind != bus.KindExternal {
		return parked, fmt.Errorf("bench: parked call: want one external parked call, got %+v", reply)
	}
	parked = time.Now()
	if err := d.client.Parked().Answer(ctx, toolParked, session, id, "c1", bus.Answer{State: bus.StateSuccess, Output: bus.Text("yes")}); err != nil {
		return parked, fmt.Errorf("bench: parked answer: %w", err)
	}
	for {
		select {
		case e, ok := <-ev.C:
			if !ok {
				return parked, fmt.Errorf("bench: parked: event stream closed")
			}
			if e.Type != bus.TypeBatchDone || e.ReplyID != id {
				continue
			}
			var done bus.BatchDone
			if err := e.DataAs(&done); err != nil {
				return parked, err
			}
			if len(done.Results) != 1 || done.Results[0].State != bus.StateSuccess {
				return parked, fmt.Errorf("bench: parked: batch.done %s", e.Data)
			}
			return parked, nil
		case <-ctx.Done():
			return parked, fmt.Errorf("bench: parked: no batch.done: %w", ctx.Err())
		}
	}
}

// measureSessions writes n sessions straight into the sessions bucket, lists
// each through the router, waits for its status to count them, and reads the
// router process's memory before and after, and its peak.
func measureSessions(ctx context.Context, d *deployment, n int) (*Sessions, error) {
	out := &Sessions{Count: n}
	before, err := d.stats(ctx, roleRouter, ctlRequest{GC: true})
	if err != nil {
		return nil, err
	}
	st0, err := d.status(ctx)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(d.ctl)
	var kv jetstream.KeyValue
	if err == nil {
		kv, err = js.KeyValue(ctx, bus.NewSubjects("").Bucket(bus.BucketSessions))
	}
	if err != nil {
		return nil, fmt.Errorf("bench: sessions: %w", err)
	}
	rec, _ := json.Marshal(groups.Session{Active: []string{benchGroup}, Updated: time.Now().UTC()}) // plain strings and a time
	t0 := time.Now()
	if err := parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		_, err := kv.Put(ctx, "mem-"+strconv.Itoa(i), rec)
		return err
	}); err != nil {
		return nil, fmt.Errorf("bench: sessions: %w", err)
	}
	out.WriteS = time.Since(t0).Seconds()
	// Each session is then used once (a listing reads it from KV, as a
	// batch does), so the router's session cache fills up to its bound.
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
	if out.Cached > groups.DefaultSessionCache {
		return nil, fmt.Errorf("bench: sessions: the router caches %d sessions, past its bound of %d", out.Cached, groups.DefaultSessionCache)
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
	out.HeapBytesPerSession = (out.HeapMiBAfter - out.HeapMiBBefore) * (1 << 20) / float64(n)
	return out, nil
}

// measureWorkers measures the I/O-bound tool's throughput at ioCallers
// callers with each count of worker copies, each copy running one call at
// a time.
func measureWorkers(ctx context.Context, d *deployment, counts []int, dur time.Duration, logf func(string, ...any)) (map[string]float64, error) {
	out := map[string]float64{}
	for _, n := range counts {
		if err := d.addSleepers(ctx, n); err != nil {
			return nil, err
		}
		logf("bench: I/O-bound tool, %d workers, %d callers", n, ioCallers)
		l, err := runLoad(ctx, dur, ioCallers, d.callTool(toolSleep))
		if err != nil {
			return nil, fmt.Errorf("bench: I/O-bound tool with %d workers: %w", n, err)
		}
		out[strconv.Itoa(n)] = l.Throughput()
	}
	return out, nil
}

func kib(kb int64) float64 { return float64(kb) / 1024 }
func mib(b uint64) float64 { return float64(b) / (1 << 20) }
