package bench

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

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

// Throughput is calls per second.
//
// It is the calls finished inside the window per second of the window, or,
// when calls last longer than a (short) window allows, every call per
// second of wall time, whichever is larger: a queue that drains only after
// the window closes still shows its rate.
func (l Load) Throughput() float64 {
	rate := float64(l.Counted) / l.Window.Seconds()
	if l.Wall > 0 {
		rate = max(rate, float64(l.Total)/l.Wall.Seconds())
	}
	return rate
}

// Generate is the load generator of the bench and the soak: callers
// goroutines (labelled as the client's part) each call fn back to back,
// until dur has passed or ctx ends; a call under way then finishes. The
// first error stops every caller and is returned. fn's context is ctx,
// bounded at dur plus bound.
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

// cores is the bench process's CPU use in cores (GOMAXPROCS when it had
// the machine to itself and the path is CPU-bound).
func (c costed) cores() float64 {
	if c.Wall <= 0 {
		return 0
	}
	return float64(c.diff[roleClient].CPUNS) / float64(c.Wall.Nanoseconds())
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

// path is one kind of call measured, and its best figures.
type path struct {
	name    string
	server  string // the part between caller and worker (mcp-go: its server)
	fn      callFunc
	midOnly bool // throughput at the mid caller count only
	lat     Latencies
	loads   map[string]costed // by caller count
}

// measure is the latency and throughput loop of both benches: after a
// warm-up, one caller's latency, then the throughput at each caller count
// (with every part's costs) of every path, each split into rounds slices
// interleaved across the paths, the best slice of a path counting: the
// lowest p50 for latency, the highest throughput for load.
func (d *deployment) measure(ctx context.Context, paths []*path, callers []int, mid, rounds int, slice time.Duration,
	logf func(string, ...any)) error {
	for _, p := range paths {
		p.loads = map[string]costed{}
		if _, err := runLoad(ctx, max(time.Duration(rounds)*slice/4, minSlice), mid, p.fn); err != nil {
			return fmt.Errorf("bench: warm-up %s: %w", p.name, err)
		}
	}
	logf("bench: latency, one caller, %d rounds of %v", rounds, slice)
	for range rounds {
		for _, p := range paths {
			lat, err := measureLatency(ctx, slice, p.fn)
			if err != nil {
				return fmt.Errorf("bench: latency %s: %w", p.name, err)
			}
			if p.lat == nil || lat.Quantile(0.5) < p.lat.Quantile(0.5) {
				p.lat = lat
			}
		}
	}
	for _, n := range callers {
		logf("bench: throughput, %d callers, %d rounds of %v", n, rounds, slice)
		k := strconv.Itoa(n)
		for range rounds {
			for _, p := range paths {
				if p.midOnly && n != mid {
					continue
				}
				c, err := d.measureLoad(ctx, slice, n, p.fn)
				if err != nil {
					return fmt.Errorf("bench: throughput %s: %w", p.name, err)
				}
				if best, ok := p.loads[k]; !ok || c.Throughput() > best.Throughput() {
					p.loads[k] = c
				}
			}
		}
	}
	return nil
}

// latency is a path's best latency and throughput by caller count.
func (p *path) latency() Latency {
	out := Latency{Throughput: map[string]float64{}}
	out.P50US, out.P90US, out.P99US = us(p.lat.Quantile(0.5)), us(p.lat.Quantile(0.9)), us(p.lat.Quantile(0.99))
	for k, c := range p.loads {
		out.Throughput[k] = c.Throughput()
	}
	return out
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

// memKB is this process's resident set size and its peak, in kB.
func memKB() (rss, hwm int64) {
	p, err := procfs.Self()
	if err != nil {
		return 0, 0
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0
	}
	return int64(st.VmRSS / 1024), int64(st.VmHWM / 1024)
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
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0
	}
	l, err := fs.LoadAvg()
	if err != nil {
		return 0
	}
	return l.Load1
}

func cpuModel() string {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return ""
	}
	cpus, err := fs.CPUInfo()
	if err != nil || len(cpus) == 0 {
		return ""
	}
	return cpus[0].ModelName
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
