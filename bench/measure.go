package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/procfs"
	"golang.org/x/sync/errgroup"
)

// callFunc makes one call as caller i.
type callFunc = func(ctx context.Context, i int) error

// Latencies is a set of call latencies.
type Latencies []time.Duration

// Quantile returns the q-quantile (nearest rank) of the sorted set.
func (l Latencies) Quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := int(q*float64(len(l))+0.5) - 1
	return l[min(max(i, 0), len(l)-1)]
}

// minLatencySamples keeps percentiles meaningful when a call is slow.
const minLatencySamples = 20

// callBound bounds a measurement's calls beyond its duration, so that a
// stuck path fails the run instead of hanging it.
const callBound = 60 * time.Second

// repeat calls fn back to back for dur, and at least minLatencySamples
// times, until it fails; fn's context ends at dur plus callBound.
func repeat(ctx context.Context, dur time.Duration, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, dur+callBound)
	defer cancel()
	end := time.Now().Add(dur)
	for n := 0; time.Now().Before(end) || n < minLatencySamples; n++ {
		if err := fn(ctx); err != nil {
			return err
		}
	}
	return nil
}

// measureLatency calls fn from one caller, one call after the other (see
// repeat), and returns the sorted latencies.
func measureLatency(ctx context.Context, dur time.Duration, fn callFunc) (lat Latencies, err error) {
	labelled(ctx, partClient, func(ctx context.Context) {
		err = repeat(ctx, dur, func(ctx context.Context) error {
			t0 := time.Now()
			if err := fn(ctx, 0); err != nil {
				return err
			}
			lat = append(lat, time.Since(t0))
			return nil
		})
	})
	slices.Sort(lat)
	return lat, err
}

// Load is what Generate counted.
type Load struct {
	Window  time.Duration // the measuring window
	Counted int64         // calls finished inside the window
	Total   int64         // every call, including those finishing after it
	Wall    time.Duration // from start until the last call ended
}

// Throughput is calls per second: those finished inside the window per
// second of it, or every call per second of wall time when larger (a queue
// that drains after the window closes still shows its rate).
func (l Load) Throughput() float64 {
	rate := float64(l.Counted) / l.Window.Seconds()
	if l.Wall > 0 {
		rate = max(rate, float64(l.Total)/l.Wall.Seconds())
	}
	return rate
}

// Generate is the load generator of the bench and the soak: callers
// goroutines (labelled as the client's) each call fn back to back until dur
// passes or ctx ends; the first error stops them all and is returned. fn's
// context is bounded at dur plus bound.
func Generate(ctx context.Context, dur, bound time.Duration, callers int, fn func(ctx context.Context, i int) error) (Load, error) {
	var stop atomic.Bool
	var counted, total atomic.Int64
	var g errgroup.Group
	ctx, cancel := context.WithTimeout(ctx, dur+bound)
	defer cancel()
	t0 := time.Now()
	timer := time.AfterFunc(dur, func() { stop.Store(true) })
	defer timer.Stop()
	defer context.AfterFunc(ctx, func() { stop.Store(true) })()
	labelled(ctx, partClient, func(ctx context.Context) {
		for i := range callers {
			g.Go(func() error {
				for !stop.Load() {
					if err := fn(ctx, i); err != nil {
						stop.Store(true)
						return err
					}
					total.Add(1)
					if !stop.Load() {
						counted.Add(1)
					}
				}
				return nil
			})
		}
	})
	err := g.Wait()
	l := Load{Window: dur, Wall: time.Since(t0), Counted: counted.Load(), Total: total.Load()}
	if err != nil {
		return l, fmt.Errorf("bench: %d callers: %w", callers, err)
	}
	return l, nil
}

// runLoad is Generate with the bench's bound.
func runLoad(ctx context.Context, dur time.Duration, callers int, fn callFunc) (Load, error) {
	return Generate(ctx, dur, callBound, callers, fn)
}

// snapshot is every part's stats at one moment; the bench process is
// under roleClient, and in this process it is the only one.
type snapshot map[string]childStats

func (d *deployment) snapshot(ctx context.Context) (snapshot, error) {
	s := snapshot{roleClient: readStats(false), roleMachine: {CPUNS: machineBusy().Nanoseconds()}}
	for role := range d.children {
		st, err := d.stats(ctx, role, ctlRequest{})
		if err != nil {
			return nil, err
		}
		s[role] = st
	}
	return s, nil
}

// costed is a load with every part's costs over it.
type costed struct {
	Load
	diff snapshot
}

// perCall is the role's CPU µs and allocations per call.
func (c costed) perCall(role string) (cpuUS, allocs float64) {
	return perCallOf(float64(c.diff[role].CPUNS)/1e3, c.Total), perCallOf(float64(c.diff[role].Mallocs), c.Total)
}

// otherCores is the CPU that processes other than the deployment's used
// during a measurement, in cores: what competed with it for the machine.
func (c costed) otherCores() float64 {
	if c.Wall <= 0 || c.diff[roleMachine].CPUNS <= 0 {
		return 0
	}
	ours := int64(0)
	for role, st := range c.diff {
		if role != roleMachine {
			ours += st.CPUNS
		}
	}
	return max(0, float64(c.diff[roleMachine].CPUNS-ours)/float64(c.Wall.Nanoseconds()))
}

// measureLoad runs a load and returns it with every part's costs over it.
func (d *deployment) measureLoad(ctx context.Context, dur time.Duration, callers int, fn callFunc) (costed, error) {
	before, err := d.snapshot(ctx)
	if err != nil {
		return costed{}, err
	}
	l, err := runLoad(ctx, dur, callers, fn)
	if err != nil {
		return costed{Load: l}, err
	}
	after, err := d.snapshot(ctx)
	if err != nil {
		return costed{Load: l}, err
	}
	diff := snapshot{}
	for role, a := range after {
		b := before[role]
		diff[role] = childStats{CPUNS: a.CPUNS - b.CPUNS, Mallocs: a.Mallocs - b.Mallocs, NumGC: a.NumGC - b.NumGC,
			RSSKB: a.RSSKB, HWMKB: a.HWMKB, HeapInuse: a.HeapInuse}
	}
	return costed{Load: l, diff: diff}, nil
}

// path is one kind of call measured, and its figures.
type path struct {
	name    string
	server  string // the process between caller and worker (mcp-go: its server; none for one_hop)
	worker  string // the process that answers: roleWorker unless set
	fn      callFunc
	midOnly bool // throughput at the mid caller count only
	// twin, when set, runs right after this path's load at the mid caller
	// count, as many callers paced to the rate this path reached, in step
	// and then spread (twins[0], twins[1]).
	twin  *path
	twins [2]pacedLoad
	lat   Latencies
	loads map[string]costed // by caller count
}

// measure is the latency and throughput loop: after a warm-up, one
// caller's latency of each path, then each path's throughput at each
// caller count, every part's costs read around each window of dur.
func (d *deployment) measure(ctx context.Context, paths []*path, callers []int, mid int, dur time.Duration,
	logf func(string, ...any)) error {
	for _, p := range paths {
		p.loads = map[string]costed{}
		if _, err := runLoad(ctx, max(dur/4, minSlice), mid, p.fn); err != nil {
			return fmt.Errorf("bench: warm-up %s: %w", p.name, err)
		}
	}
	logf("bench: latency, one caller, %v", dur)
	for _, p := range paths {
		var err error
		if p.lat, err = measureLatency(ctx, dur, p.fn); err != nil {
			return fmt.Errorf("bench: latency %s: %w", p.name, err)
		}
	}
	for _, n := range callers {
		logf("bench: throughput, %d callers, %v", n, dur)
		for _, p := range paths {
			if p.midOnly && n != mid {
				continue
			}
			c, err := d.measureLoad(ctx, dur, n, p.fn)
			if err != nil {
				return fmt.Errorf("bench: throughput %s: %w", p.name, err)
			}
			p.loads[strconv.Itoa(n)] = c
			if p.twin == nil || n != mid {
				continue
			}
			if p.twins, err = d.measureTwin(ctx, dur, n, c.Throughput(), p.twin, logf); err != nil {
				return err
			}
		}
	}
	return nil
}

// pacedLoad is a load paced to a rate, and the pacing alone (calling
// nothing) at that rate.
type pacedLoad struct{ calls, pacing costed }

// measureTwin runs twin's calls from callers callers paced to rate, in
// step and spread, each followed by the pacing alone; the windows are
// shorter than dur, as a paced load's rate is known beforehand.
func (d *deployment) measureTwin(ctx context.Context, dur time.Duration, callers int, rate float64, twin *path,
	logf func(string, ...any)) (out [2]pacedLoad, err error) {
	for way := range out {
		logf("bench: %s paced to %.0f calls/s, %d callers (%s), %v", twin.name, rate, callers, [...]string{"in step", "spread"}[way], dur/2)
		out[way].calls, err = d.measureLoad(ctx, max(dur/2, minSlice), callers, paced(callers, rate, way, twin.fn))
		if err == nil {
			out[way].pacing, err = d.measureLoad(ctx, max(dur/4, minSlice), callers, paced(callers, rate, way,
				func(context.Context, int) error { return nil }))
		}
		if err != nil {
			return out, fmt.Errorf("bench: %s paced: %w", twin.name, err)
		}
	}
	return out, nil
}

// paced is fn for callers callers that together call at rate per second:
// each caller's calls start one period (callers / rate) apart, the
// callers' first ones at once (way 0, in step) or each a share of a period
// after the one before's (way 1, spread); a caller that falls behind its
// schedule catches up without pausing.
func paced(callers int, rate float64, way int, fn callFunc) callFunc {
	period := time.Duration(float64(callers) / max(rate, 1e-3) * float64(time.Second))
	var once sync.Once
	var start time.Time                // the first call's
	next := make([]time.Time, callers) // each caller's next start, touched by that caller alone
	return func(ctx context.Context, i int) error {
		once.Do(func() { start = time.Now() })
		if next[i].IsZero() {
			next[i] = start.Add(period * time.Duration(i*way) / time.Duration(callers))
		}
		if wait := time.Until(next[i]); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		next[i] = next[i].Add(period)
		return fn(ctx, i)
	}
}

// figures are a path's latency, throughput and every process's costs per
// call, by caller count.
func (p *path) figures() Path {
	out := Path{Latency: Latency{Throughput: map[string]float64{}}, CPUUSPerCall: map[string]map[string]float64{},
		AllocsPerCall: map[string]map[string]float64{}, OtherCores: map[string]float64{}}
	out.P50US, out.P90US, out.P99US = us(p.lat.Quantile(0.5)), us(p.lat.Quantile(0.9)), us(p.lat.Quantile(0.99))
	for k, c := range p.loads {
		cpu, allocs := map[string]float64{}, map[string]float64{}
		for part, role := range map[string]string{partRouter: p.server, partWorker: cmp.Or(p.worker, roleWorker), partClient: roleClient, procNATS: roleNATS} {
			if role != "" {
				cpu[part], allocs[part] = c.perCall(role)
			}
		}
		out.Throughput[k], out.CPUUSPerCall[k], out.AllocsPerCall[k], out.OtherCores[k] = c.Throughput(), cpu, allocs, c.otherCores()
	}
	return out
}

// overRaw is what the SDKs cost over their raw twins in p's load at mid
// callers and its twin's right after it.
func (p *path) overRaw(mid int) OverRaw {
	sdk := p.loads[strconv.Itoa(mid)]
	sdkWorker, _ := sdk.perCall(roleWorker)
	sdkClient, _ := sdk.perCall(roleClient)
	o := OverRaw{Callers: mid, SDKRate: sdk.Throughput()}
	for way, t := range []*RawTwin{&o.InStep, &o.Spread} {
		raw := p.twins[way].calls
		*t = RawTwin{Rate: raw.Throughput(), OtherCores: raw.otherCores()}
		t.WorkerUS, _ = raw.perCall(p.twin.worker)
		t.ClientUS, _ = raw.perCall(roleClient)
		t.PacingUS, _ = p.twins[way].pacing.perCall(roleClient)
		t.WorkerOverUS, t.ClientOverUS = sdkWorker-t.WorkerUS, sdkClient-(t.ClientUS-t.PacingUS)
	}
	o.WorkerOverRawUS, o.ClientOverRawUS = o.InStep.WorkerOverUS, o.InStep.ClientOverUS
	return o
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func perCallOf(v float64, calls int64) float64 {
	if calls <= 0 {
		return 0
	}
	return v / float64(calls)
}

// The machine's and this process's figures from /proc; each is 0 (or "")
// where there is no /proc.

// procSelf is this process's resident set size and its peak, in kB, and
// the write system calls it has made so far (syscw; -1 when it cannot tell).
func procSelf() (rss, hwm, writes int64) {
	writes = -1
	if p, err := procfs.Self(); err == nil {
		if st, err := p.NewStatus(); err == nil {
			rss, hwm = int64(st.VmRSS/1024), int64(st.VmHWM/1024)
		}
		if io, err := p.IO(); err == nil {
			writes = int64(io.SyscW)
		}
	}
	return rss, hwm, writes
}

// machineBusy is the CPU time every process on the machine has used since
// boot (all of /proc/stat's but idle and iowait; guest time is already in
// user).
func machineBusy() time.Duration {
	st, err := procfs.NewStat()
	if err != nil {
		return 0
	}
	c := st.CPUTotal
	return time.Duration((c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal) * float64(time.Second))
}

// loadAvg is the 1-minute load average.
func loadAvg() float64 {
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if l, err := fs.LoadAvg(); err == nil {
			return l.Load1
		}
	}
	return 0
}

func cpuModel() string {
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if cpus, err := fs.CPUInfo(); err == nil && len(cpus) > 0 {
			return cpus[0].ModelName
		}
	}
	return ""
}

// revision is the vcs revision stamped into the binary, if any, "+dirty"
// when modified.
func revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			rev = s.Value
		} else if s.Key == "vcs.modified" && s.Value == "true" {
			dirty = "+dirty"
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

// cpuValue is the index of a CPU profile's nanoseconds in its samples.
func cpuValue(p *profile.Profile) (int, error) {
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			return i, nil
		}
	}
	return 0, errors.New("bench: the profile has no cpu nanoseconds")
}

// Share is the part of a CPU profile one kind of work took.
type Share struct {
	Kind      string  `json:"kind"`
	USPerCall float64 `json:"us_per_call"`
	Percent   float64 `json:"percent"`
}

// shareKinds sorts a sample by its stack, innermost frame first: the first
// kind with a matching frame prefix takes it. The collector and allocator
// come first, then the kernel's sends and receives, then the rest.
var shareKinds = []struct {
	kind     string
	prefixes []string
}{
	{"garbage collector (marking, assists, sweeping)", []string{"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcStart", "runtime.markroot"}},
	{"stack growth", []string{"runtime.newstack", "runtime.copystack"}},
	{"allocation", []string{"runtime.mallocgc", "runtime.newobject", "runtime.makeslice", "runtime.growslice", "runtime.makemap", "runtime.mapassign"}},
	{"socket writes (sending messages)", []string{"syscall.write", "syscall.Write", "internal/poll.(*FD).Write", "internal/poll.(*FD).Writev"}},
	{"socket reads (receiving messages)", []string{"syscall.read", "syscall.Read", "internal/poll.(*FD).Read"}},
	{"scheduler, preemption and wakeups", []string{"runtime.asyncPreempt", "runtime.schedule", "runtime.findRunnable", "runtime.park_m", "runtime.futex", "runtime.notewakeup", "runtime.ready", "runtime.goready", "runtime.wakep", "runtime.selectgo", "runtime.chansend", "runtime.chanrecv", "runtime.netpoll", "runtime.mcall", "runtime.goexit0", "runtime.lock", "runtime.unlock"}},
	{"JSON", []string{"github.com/goccy/go-json", "encoding/json", "github.com/toolbus/toolbus/bus.appendString", "github.com/toolbus/toolbus/bus.(*ExecRequest).AppendJSON", "github.com/toolbus/toolbus/bus.(*Result).AppendJSON", "github.com/santhosh-tekuri/jsonschema"}},
	{"JetStream client (publish, acknowledgement)", []string{"github.com/nats-io/nats.go/jetstream"}},
	{"NATS client (parse, dispatch, headers, publish)", []string{"github.com/nats-io/nats.go", "github.com/nats-io/nats%2ego"}},
	{"contexts and timers", []string{"context.", "time."}},
	{"toolbus", []string{"github.com/toolbus/toolbus/"}},
	// nats-server's profile: its streams' work, then the rest of it.
	{"nats-server JetStream (stream store, dedupe)", []string{"github.com/nats-io/nats-server/v2/server.(*stream)", "github.com/nats-io/nats-server/v2/server.(*fileStore)"}},
	{"nats-server (parse, match, deliver)", []string{"github.com/nats-io/nats-server/"}},
}

// otherKind is the kind of a sample no shareKinds entry took.
const otherKind = "other (runtime, profiler)"

// SplitProfile reads the CPU profile in file and returns how its samples
// divide by kind, as µs per call over calls, largest first.
func SplitProfile(file string, calls int64) ([]Share, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	p, err := profile.ParseData(b)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", file, err)
	}
	return splitSamples(p, calls)
}

// splitSamples divides p's CPU time by kind.
func splitSamples(p *profile.Profile, calls int64) ([]Share, error) {
	vi, err := cpuValue(p)
	if err != nil {
		return nil, err
	}
	ns := map[string]int64{}
	var total int64
	for _, s := range p.Sample {
		v := s.Value[vi]
		ns[kindOf(s)] += v
		total += v
	}
	out := make([]Share, 0, len(ns))
	for k, v := range ns {
		sh := Share{Kind: k, Percent: 100 * float64(v) / float64(max(total, 1))}
		if calls > 0 {
			sh.USPerCall = float64(v) / 1e3 / float64(calls)
		}
		out = append(out, sh)
	}
	slices.SortFunc(out, func(a, b Share) int {
		return cmp.Or(cmp.Compare(b.Percent, a.Percent), strings.Compare(a.Kind, b.Kind))
	})
	return out, nil
}

// kindOf is the shareKinds kind of sample s.
func kindOf(s *profile.Sample) string {
	for _, k := range shareKinds {
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				for _, pre := range k.prefixes {
					if strings.HasPrefix(line.Function.Name, pre) {
						return k.kind
					}
				}
			}
		}
	}
	return otherKind
}
