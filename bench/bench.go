// Package bench measures toolbus against the physical limit of its design,
// in one run on one embedded nats-server: raw core NATS request/reply
// (one_hop, and relay: requester → forwarder in a queue group → responder,
// the reply relayed back, the same four messages a routed call needs),
// the full agent → router → worker → agent path with a read-only and a
// non-read-only tool, scaling of an I/O-bound tool with worker copies, the
// parked path, router memory with many sessions, and mcp-go's streamable
// HTTP server for comparison. Run returns a Report; WriteTable prints it and
// json.Marshal gives the machine-readable form.
//
// Everything runs in this process, so process-wide figures (CPU, heap
// allocations, memory) include nats-server, the client and the workers.
// The router's own share is estimated twice: from CPU profile samples of
// goroutines labelled as the router's, and by subtracting a run in which a
// byte-forwarding stand-in replaces the router (the "bare" path).
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/groups"
)

// Options configure Run. Every zero value has a default.
type Options struct {
	// Quick shortens the run (well under 30 s): Duration 300 ms and
	// 1,000 sessions unless set.
	Quick bool
	// Duration is the length of each measurement (split into Rounds
	// slices); zero means 3 s (300 ms when Quick).
	Duration time.Duration
	// Callers are the concurrent caller counts of the throughput
	// measurements; nil means 1, 16, 256. CPU time and allocations per call
	// are taken from the run with the count nearest 16, and mcp-go is
	// measured with that many callers.
	Callers []int
	// Workers are the worker copy counts of the I/O-bound tool; nil means
	// 1, 2, 4, 8.
	Workers []int
	// Sessions is how many sessions the memory measurement creates; zero
	// means 10,000 (1,000 when Quick).
	Sessions int
	// Rounds splits each latency and throughput measurement into this many
	// slices, interleaved across the paths compared; the best slice counts.
	// Zero means 3.
	Rounds int
	// ProfileWindow is the length of each path's CPU profile (the CPU by
	// part); zero means Duration, and never less than 2 s.
	ProfileWindow time.Duration
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// ioCallers is the caller count of the I/O-bound tool measurement.
const ioCallers = 64

// minProfile is the shortest CPU profile of a path, and profileSample
// the CPU time one profile sample stands for (pprof's 100 Hz).
const (
	minProfile    = 2 * time.Second
	profileSample = 10 * time.Millisecond
)

// minSlice is the shortest measuring slice.
const minSlice = 100 * time.Millisecond

func (o *Options) defaults() {
	if o.Duration <= 0 {
		o.Duration = 3 * time.Second
		if o.Quick {
			o.Duration = 300 * time.Millisecond
		}
	}
	if len(o.Callers) == 0 {
		o.Callers = []int{1, 16, 256}
	}
	o.Callers = sortedPositive(o.Callers)
	if len(o.Workers) == 0 {
		o.Workers = []int{1, 2, 4, 8}
	}
	o.Workers = sortedPositive(o.Workers)
	if o.Sessions <= 0 {
		o.Sessions = 100000
		if o.Quick {
			o.Sessions = 1000
		}
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	if o.ProfileWindow <= 0 {
		o.ProfileWindow = max(o.Duration, minProfile)
	}
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
	best := xs[0]
	for _, x := range xs {
		if abs(x-want) < abs(best-want) {
			best = x
		}
	}
	return best
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// path is one thing measured for latency and throughput.
type path struct {
	name string
	fn   callFunc
	out  *Path
}

// Run starts an embedded nats-server with everything measured on it, runs
// every measurement, stops it all and returns the report. It fails when a
// call fails.
//
// The machine may be shared, so each latency and throughput measurement is
// split into Options.Rounds slices, interleaved across the paths compared
// (raw, toolbus, bare, mcp-go), and the best slice of each path counts: the
// lowest p50 for latency, the highest throughput (with its CPU time and
// allocations) for load.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts.defaults()
	start := time.Now()
	mid := nearest(opts.Callers, 16)
	rep := newReport(opts, mid)
	logf := opts.Logf
	slice := max(opts.Duration/time.Duration(opts.Rounds), minSlice)
	logf("bench: starting nats-server, router, workers and the mcp-go server")
	d, err := deploy(ctx, opts.Callers[len(opts.Callers)-1], false, logf)
	if err != nil {
		return nil, err
	}
	defer d.close()
	var m *mcpHTTP
	labelled(ctx, partClient, func(ctx context.Context) { m, err = startMCP(ctx, mid) })
	if err != nil {
		return nil, err
	}
	defer m.close(ctx)

	var bareOut, mcpOut Path
	paths := []path{
		{"raw one_hop", d.oneHop, &rep.Baseline.OneHop},
		{"raw relay", d.relay, &rep.Baseline.Relay},
		{"toolbus read-only", d.callTool(d.client, toolRead), &rep.Toolbus},
		{"toolbus write", d.callTool(d.client, toolWrite), &rep.ToolbusWrite},
	}
	bare := path{"bare (no router)", d.callTool(d.bare, toolRead), &bareOut}
	mcpPath := path{"mcp-go HTTP", m.call, &mcpOut}
	for _, p := range append(paths, bare, mcpPath) {
		p.out.Throughput = map[string]float64{}
		if _, err := runLoad(ctx, max(opts.Duration/5, minSlice), mid, p.fn); err != nil {
			return nil, fmt.Errorf("bench: warm-up %s: %w", p.name, err)
		}
	}

	// Latency with one sequential caller.
	logf("bench: latency, one caller, %d rounds of %v", opts.Rounds, slice)
	lats := map[string]latencies{}
	for range opts.Rounds {
		for _, p := range append(paths, bare, mcpPath) {
			lat, err := measureLatency(ctx, slice, p.fn)
			if err != nil {
				return nil, fmt.Errorf("bench: latency %s: %w", p.name, err)
			}
			if best, ok := lats[p.name]; !ok || lat.quantile(0.5) < best.quantile(0.5) {
				lats[p.name] = lat
			}
		}
	}
	for _, p := range append(paths, bare, mcpPath) {
		lat := lats[p.name]
		p.out.P50US, p.out.P90US, p.out.P99US = us(lat.quantile(0.5)), us(lat.quantile(0.9)), us(lat.quantile(0.99))
	}

	// Throughput, of the bare path too at every caller count; CPU and
	// allocations per call at the mid caller count, where mcp-go runs too.
	for _, n := range opts.Callers {
		run := append(slices.Clone(paths), bare)
		if n == mid {
			run = append(run, mcpPath)
		}
		logf("bench: throughput, %d callers, %d rounds of %v", n, opts.Rounds, slice)
		loads := map[string]load{}
		for range opts.Rounds {
			for _, p := range run {
				l, err := runLoad(ctx, slice, n, p.fn)
				if err != nil {
					return nil, fmt.Errorf("bench: throughput %s: %w", p.name, err)
				}
				if best, ok := loads[p.name]; !ok || l.throughput() > best.throughput() {
					loads[p.name] = l
				}
			}
		}
		for _, p := range run {
			l := loads[p.name]
			p.out.Throughput[strconv.Itoa(n)] = l.throughput()
			if n == mid {
				p.out.CPUUSPerCall, p.out.AllocsPerCall, p.out.CoresUsed = l.cpuPerCall(), l.allocsPerCall(), l.cores()
			}
		}
	}
	rep.Bare = Cost{CPUUSPerCall: bareOut.CPUUSPerCall, AllocsPerCall: bareOut.AllocsPerCall,
		CoresUsed: bareOut.CoresUsed, Throughput: bareOut.Throughput[strconv.Itoa(mid)],
		P50US: bareOut.P50US, Throughputs: bareOut.Throughput}
	rep.MCPHTTP16, rep.MCPHTTPP50US = mcpOut.Throughput[strconv.Itoa(mid)], mcpOut.P50US
	rep.MCPHTTPCallers, rep.MCPProtocol = mid, m.protocol

	// CPU by part, from goroutine labels in a CPU profile.
	rep.CPUMethod = "profile-labels"
	attribute := []struct {
		name, key string
		fn        callFunc
		out       *map[string]float64
	}{
		{"raw relay", "relay", d.relay, &rep.Baseline.Relay.CPUByPartUS},
		{"bare", "bare", bare.fn, &rep.Bare.CPUByPartUS},
		{"toolbus read-only", "toolbus", paths[2].fn, &rep.Toolbus.CPUByPartUS},
		{"toolbus write", "toolbus_write", paths[3].fn, &rep.ToolbusWrite.CPUByPartUS},
	}
	// The profiler samples every 10 ms: a part's figure moves in steps of
	// 10 ms over the calls profiled, so the window is never short (a
	// 300 ms one gave a part 2 to 5 samples, and figures from 9 to 61 µs).
	window := opts.ProfileWindow
	rep.ProfileSampleUS = map[string]float64{}
	for _, a := range attribute {
		logf("bench: CPU profile %s, %d callers, %v", a.name, mid, window)
		var l load
		parts, err := cpuByPart(func() (err error) { l, err = runLoad(ctx, window, mid, a.fn); return err })
		if err == errProfiling {
			rep.CPUMethod = "subtraction (the CPU profiler was busy)"
			break
		}
		if err != nil {
			return nil, fmt.Errorf("bench: CPU profile %s: %w", a.name, err)
		}
		*a.out = perCall(parts, l.total)
		rep.ProfileSampleUS[a.key] = perCallOf(us(profileSample), l.total)
	}
	for _, p := range []*Path{&rep.Toolbus, &rep.ToolbusWrite} {
		p.RouterCPUUSPerCallSubtracted = p.CPUUSPerCall - rep.Bare.CPUUSPerCall
		p.RouterAllocsPerCall = p.AllocsPerCall - rep.Bare.AllocsPerCall
		p.RouterCPUUSPerCall = p.RouterCPUUSPerCallSubtracted
		if v, ok := p.CPUByPartUS[partRouter]; ok {
			p.RouterCPUUSPerCall = v
		}
	}

	// The I/O-bound tool with more and more worker copies.
	for _, n := range opts.Workers {
		if err := d.addSleepers(ctx, n); err != nil {
			return nil, err
		}
		logf("bench: I/O-bound tool, %d workers, %d callers", n, ioCallers)
		for range opts.Rounds {
			l, err := runLoad(ctx, slice, ioCallers, d.callTool(d.client, toolSleep))
			if err != nil {
				return nil, fmt.Errorf("bench: I/O-bound tool with %d workers: %w", n, err)
			}
			k := strconv.Itoa(n)
			rep.Workers[k] = max(rep.Workers[k], l.throughput())
		}
	}

	logf("bench: parked path, %v", opts.Duration)
	if rep.Parked, err = d.measureParked(ctx, opts.Duration); err != nil {
		return nil, err
	}
	rep.ParkedP50US = rep.Parked.P50US

	m.close(ctx)
	logf("bench: memory with %d sessions", opts.Sessions)
	if rep.Sessions, err = d.measureSessions(ctx, opts.Sessions); err != nil {
		return nil, err
	}
	rep.RouterRSSMiB10k, rep.RouterHeapMiB10k = rep.Sessions.RSSMiBAfter, rep.Sessions.HeapMiBAfter

	rep.finish()
	rep.Machine.LoadAvgEnd = loadAvg()
	rep.ElapsedS = time.Since(start).Seconds()
	return rep, nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func perCall(parts map[string]time.Duration, calls int64) map[string]float64 {
	out := map[string]float64{}
	for _, p := range []string{partRouter, partWorker, partClient, partOther} {
		out[p] = 0
		if calls > 0 {
			out[p] = us(parts[p]) / float64(calls)
		}
	}
	return out
}

// measureParked measures the parked path one call at a time: a call of an
// external tool parks, the agent answers it, and batch.done arrives.
func (d *deployment) measureParked(ctx context.Context, dur time.Duration) (Parked, error) {
	const session = "bench-parked"
	var out Parked
	ev, err := d.client.Watch(ctx, session)
	if err != nil {
		return out, fmt.Errorf("bench: parked: %w", err)
	}
	defer func() { _ = ev.Stop(context.WithoutCancel(ctx)) }()
	var total, park, answer latencies
	ctx, cancel := context.WithTimeout(ctx, dur+callBound)
	defer cancel()
	end := time.Now().Add(dur)
	for time.Now().Before(end) || len(total) < minLatencySamples {
		id := client.NewReplyID()
		t0 := time.Now()
		reply, err := d.client.Call(ctx, session, bus.Batch{Calls: []bus.Call{{ID: "c1", Name: toolParked, Input: benchInput}}},
			client.WithReplyID(id))
		if err != nil {
			return out, fmt.Errorf("bench: parked call: %w", err)
		}
		if len(reply.Parked) != 1 || reply.Parked[0].Kind != bus.KindExternal {
			return out, fmt.Errorf("bench: parked call: want one external parked call, got %+v", reply)
		}
		t1 := time.Now()
		if err := d.client.Answer(ctx, toolParked, session, id, "c1", bus.Answer{State: bus.StateSuccess, Output: bus.Text("yes")}); err != nil {
			return out, fmt.Errorf("bench: parked answer: %w", err)
		}
		if err := awaitDone(ctx, ev, id); err != nil {
			return out, err
		}
		t2 := time.Now()
		total, park, answer = append(total, t2.Sub(t0)), append(park, t1.Sub(t0)), append(answer, t2.Sub(t1))
	}
	for _, l := range []latencies{total, park, answer} {
		slices.Sort(l)
	}
	out.P50US, out.P99US = us(total.quantile(0.5)), us(total.quantile(0.99))
	out.ParkP50US, out.AnswerToDoneP50US = us(park.quantile(0.5)), us(answer.quantile(0.5))
	out.Calls = len(total)
	return out, nil
}

// awaitDone waits for the batch.done of reply id id, with a successful result.
func awaitDone(ctx context.Context, ev *client.Events, id string) error {
	for {
		select {
		case e, ok := <-ev.C:
			if !ok {
				return fmt.Errorf("bench: parked: event stream closed")
			}
			if e.Type != bus.TypeBatchDone || e.ReplyID != id {
				continue
			}
			var done bus.BatchDone
			if err := e.DataAs(&done); err != nil {
				return err
			}
			if len(done.Results) != 1 || done.Results[0].State != bus.StateSuccess {
				return fmt.Errorf("bench: parked: batch.done %s", e.Data)
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("bench: parked: no batch.done: %w", ctx.Err())
		}
	}
}

// measureSessions writes n sessions with the bench group active straight
// into the sessions bucket (as other routers would), lists the tools of
// each through the router (which reads and caches it, up to the cache's
// bound), checks the router's P.admin.status count, and reads the
// process's heap and RSS before and after.
func (d *deployment) measureSessions(ctx context.Context, n int) (SessionMemory, error) {
	out := SessionMemory{Count: n}
	out.HeapMiBBefore, out.RSSMiBBefore = memoryNow()
	cached0, err := d.cachedSessions(ctx, func(int) bool { return true })
	if err != nil {
		return out, err
	}
	nc, err := d.connect(ctx, partOther)
	if err != nil {
		return out, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return out, fmt.Errorf("bench: sessions: %w", err)
	}
	kv, err := js.KeyValue(ctx, d.x.Subjects().Bucket(bus.BucketSessions))
	if err != nil {
		return out, fmt.Errorf("bench: sessions: %w", err)
	}
	rec, err := json.Marshal(groups.Session{Active: []string{benchGroup}, Updated: time.Now().UTC()})
	if err != nil {
		return out, err
	}
	err = parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		_, err := kv.Put(ctx, "mem-"+strconv.Itoa(i), rec)
		return err
	})
	if err != nil {
		return out, fmt.Errorf("bench: sessions: %w", err)
	}
	// Each session is then used once (a listing reads it from KV, as a
	// batch does), so the router's session cache fills up to its bound.
	err = parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		_, err := d.client.Tools(ctx, "mem-"+strconv.Itoa(i), "", nil)
		return err
	})
	if err != nil {
		return out, fmt.Errorf("bench: sessions: listing: %w", err)
	}
	want := min(cached0+n, groups.DefaultSessionCache)
	out.Cached, err = d.cachedSessions(ctx, func(c int) bool { return c >= want })
	if err != nil {
		return out, fmt.Errorf("bench: sessions: the router caches %d sessions, want %d: %w", out.Cached, want, err)
	}
	if out.Cached > groups.DefaultSessionCache {
		return out, fmt.Errorf("bench: sessions: the router caches %d sessions, past its bound of %d", out.Cached, groups.DefaultSessionCache)
	}
	out.HeapMiBAfter, out.RSSMiBAfter = memoryNow()
	out.HeapBytesPerSession = (out.HeapMiBAfter - out.HeapMiBBefore) * (1 << 20) / float64(n)
	return out, nil
}

// cachedSessions polls the router's P.admin.status until the sessions it
// caches satisfy ok, and returns the last count.
func (d *deployment) cachedSessions(ctx context.Context, ok func(int) bool) (int, error) {
	var n int
	err := d.x.EveryStatus(ctx, func(st bus.Status) error {
		n = st.Sessions
		if !ok(n) {
			return fmt.Errorf("%d sessions cached", n)
		}
		return nil
	})
	return n, err
}
