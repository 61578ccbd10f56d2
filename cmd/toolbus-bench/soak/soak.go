// Package soak runs toolbus under load with faults (docs/operations.md,
// "Soak"): two routers and three toolworkers as processes on a 3-node
// cluster, agents that behave as docs/protocol.md says, and counters of what
// was lost, duplicated or wrong. `toolbus soak` is a thin caller.
package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bench"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/worker"
)

// Help is the long help of toolbus soak: what it runs and what each
// counter means (docs/operations.md, "Soak", says the same).
const Help = `Runs a deployment of 2 routers and 3 toolworkers as separate processes (the real
router and toolworker binaries: --bin DIR, else next to toolbus, else $PATH, else built
from the module when run inside it) on a 3-node NATS cluster with replicas 3 started in
this process (or on --nats URL, without NATS faults), drives agents through many sessions
with side-effecting, read-only, durable and parked calls, answers parked calls as an external
handler and approver would, and SIGKILLs and restarts a worker, a router and (with its own
cluster) stops and restarts the NATS node leading a stream, one fault every --fault-every.

Agents behave as docs/protocol.md says: a batch that gets no reply (time-out, no router)
or an unavailable result is sent again with the same reply id; a parked batch is followed
through the events stream and re-sent every 10 s as a status check; unknown_outcome is
final (never run again). Every batch carries expirytime = first send + --batch-deadline.

Counters (every call counts once, however often its batch was sent):
  calls        tool calls the agents sent
  completed    calls that got a final result: any result but unavailable (success, an error
               such as unknown_outcome or timeout, ...) by their batch's expirytime + --grace
  lost         calls - completed: no final result by the batch's expirytime (or the
               accepted answer, when later) + --grace, although the agent re-sent the batch
  duplicated   calls whose side effect was observed twice (record_effect and
               record_effect_confirm append one line per execution, with the call id, to an
               effects file), or that were given two different final results (calls that
               are not read-only: from replies, re-sends, call.result and batch.done events)
  parked_lost  parked calls whose answer was accepted but that never completed
  faults       the faults injected, with the time, the victim and how long it was down
  p50_ms, p99_ms  first send to final result, completed calls that do not park
The JSON report adds by_kind, errors (final error results by code), unknown_outcome_ran
(unknown outcomes whose effect did happen), durable_reruns (runs of a durable call after
its effect had happened: redeliveries, which its tool absorbs), handoff_missed, batch_done_missing,
wrong_results and problems (each lost, duplicated or wrong call with its event trail).
The command fails when anything was lost, duplicated or wrong.`

// Options are the soak's settings (the flags of toolbus soak); Run takes
// them as they are, defaults applied by the caller.
type Options struct {
	Duration      time.Duration // how long agents send new batches
	FaultEvery    time.Duration // time between faults; negative: none
	Down          time.Duration // how long a killed process stays down (a NATS node twice that)
	Grace         time.Duration // how long past a batch's expirytime its agent still waits and re-sends
	BatchDeadline time.Duration // each batch's expirytime, from its first send
	Agents        int           // agents sending batches at once
	NATSURL       string        // NATS URL(s) to run on; empty starts a 3-node cluster in this process
	Prefix        string        // subject prefix of the deployment
	Replicas      int           // JetStream replicas
	Bin           string        // directory holding the router and toolworker executables ("": found or built)
	Dir           string        // work directory: process logs, the effects file
	// Conn holds the credentials and TLS settings for NATSURL (flags and
	// the nats CLI's environment); the soak's own cluster needs none.
	Conn natsconn.Config
}

// Report is the soak's result.
type Report struct {
	soakKindReport                  // every call's (p50_ms, p99_ms: of those that do not park)
	ParkedLost       int            `json:"parked_lost"`
	Faults           []soakFault    `json:"faults"`
	DurationS        float64        `json:"duration_s"`
	Batches          int            `json:"batches"`
	Sessions         int            `json:"sessions"`
	Resends          int            `json:"resends"`
	Errors           map[string]int `json:"errors"`
	UnknownRan       int            `json:"unknown_outcome_ran"`
	HandoffMissed    int            `json:"handoff_missed"`
	BatchDoneMissing int            `json:"batch_done_missing"`
	// BatchDoneUnstored counts batches whose unawaited batch.done is
	// missing from the stream after a fault (3.4 allows it), not failures.
	BatchDoneUnstored int                        `json:"batch_done_unstored"`
	WrongResults      int                        `json:"wrong_results"`
	Effects           int                        `json:"effects"`
	DurableReruns     int                        `json:"durable_reruns"`
	ByKind            map[string]*soakKindReport `json:"by_kind"`
	Problems          []soakProblem              `json:"problems"`
	NATS              string                     `json:"nats"`
	Prefix            string                     `json:"prefix"`
	Binaries          string                     `json:"binaries"`
	WorkDir           string                     `json:"work_dir,omitempty"`
}

// soakKindReport is one call kind's share of the report, or all of it.
type soakKindReport struct {
	Calls      int     `json:"calls"`
	Completed  int     `json:"completed"`
	Succeeded  int     `json:"succeeded"`
	Lost       int     `json:"lost"`
	Duplicated int     `json:"duplicated"`
	P50MS      float64 `json:"p50_ms"`
	P99MS      float64 `json:"p99_ms"`
	lat        []time.Duration
}

// soakProblem is one call that went wrong, with its trail.
type soakProblem struct {
	Call  string   `json:"call"`
	Kind  string   `json:"kind"`
	What  string   `json:"what"`
	Trail []string `json:"trail"`
}

// soakMaxProblems bounds the problems listed.
const soakMaxProblems = 50

// Run runs the soak o describes, logging progress through logf, and
// returns its report; the error is the deployment's, not the counters'.
func Run(ctx context.Context, o *Options, logf func(string, ...any)) (*Report, error) {
	bins, from, err := cli.Helpers(ctx, o.Bin, o.Dir, logf, "router", "toolworker")
	if err != nil {
		return nil, err
	}
	logf("router %s, toolworker %s (%s)", bins[0], bins[1], from)
	d, err := startSoakDeploy(ctx, o, bins[0], bins[1], logf)
	if err != nil {
		return nil, err
	}
	stopDeploy := sync.OnceFunc(d.stop)
	defer stopDeploy()
	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	var cfg natsconn.Config
	if d.cluster == nil {
		cfg = o.Conn
	}
	cfg.URLs = d.url
	connect := func(name string) (*nats.Conn, error) {
		nc, err := cfg.Connect("toolbus-soak-"+name, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			return nil, fmt.Errorf("connect %s: %w", natsconn.Redact(d.url), err)
		}
		conns = append(conns, nc)
		return nc, nil
	}
	// The external tool: registered by the soak, its own handler.
	hnc, err := connect("handler")
	if err != nil {
		return nil, err
	}
	hw, err := bench.StartWorker(ctx, hnc, worker.Config{Prefix: o.Prefix, Heartbeat: soakHeartbeat}, func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: soakExternalTool, Description: "Ask the soak's approver (external).",
			External: true, ConcurrencySafe: true, Permission: bus.PermissionAllow},
			func(context.Context, *worker.Call, struct{}) (string, error) {
				return "", errors.New("external: never run")
			})
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = hw.Stop(context.WithoutCancel(ctx)) }()
	cl := client.New(hnc, client.Config{Prefix: o.Prefix, Source: "soak/approver"})
	if err := waitSoakLive(ctx, cl); err != nil {
		return nil, err
	}
	logf("deployment live: %d routers, %d workers on %s, prefix %s", soakRouters, soakWorkers, d.url, o.Prefix)

	t := &soakTracker{start: time.Now(), calls: map[string]*soakCall{}, bats: map[string]*soakBatch{}}
	l := &soakLoad{o: o, t: t, run: fmt.Sprintf("%08x", rand.Uint32())}
	runCtx, stopRun := context.WithCancel(ctx) // consumers and the approver, until the counting
	defer stopRun()
	l.appr = &soakApprover{l: l, cl: cl, ctx: runCtx}
	enc, err := connect("events")
	if err != nil {
		return nil, err
	}
	if err := l.events(runCtx, client.New(enc, client.Config{Prefix: o.Prefix, Source: "soak/events"})); err != nil {
		return nil, err
	}
	if err := l.appr.follow(runCtx); err != nil {
		return nil, err
	}

	agents := make([]*soakAgent, o.Agents)
	for i := range agents {
		nc, err := connect(fmt.Sprintf("agent%d", i))
		if err != nil {
			return nil, err
		}
		agents[i] = &soakAgent{i: i, r: rand.New(rand.NewPCG(uint64(i)+1, uint64(l.t.start.UnixNano()))),
			cl: client.New(nc, client.Config{Prefix: o.Prefix, Source: fmt.Sprintf("soak/agent%d", i)})}
	}
	loadCtx, endLoad := context.WithTimeout(ctx, o.Duration)
	defer endLoad()
	defer context.AfterFunc(loadCtx, func() { logf("load over: finishing the batches under way") })()
	var faults []soakFault
	fdone := make(chan struct{})
	go func() {
		defer close(fdone)
		if o.FaultEvery < 0 {
			return
		}
		for n := 0; ; n++ {
			_ = bus.Sleep(loadCtx, o.FaultEvery)
			if loadCtx.Err() != nil {
				return
			}
			f := d.inject(loadCtx, n, t.start, o.Down)
			logf("fault %d at %.1fs: %s %s, down %d ms %s", n+1, float64(f.AtMS)/1000, f.Kind, f.Target, f.DownMS, f.Error)
			faults = append(faults, f)
		}
	}()
	// The bench's load generator: each agent makes batches back to back,
	// with a pause of 20 to 200 ms, and finishes the one under way.
	_, _ = bench.Generate(loadCtx, o.Duration, 0, o.Agents, func(_ context.Context, i int) error {
		l.batch(ctx, agents[i])
		_ = bus.Sleep(loadCtx, time.Duration(20+agents[i].r.IntN(180))*time.Millisecond)
		return nil
	})
	<-fdone
	elapsed := time.Since(t.start)
	// batch.done events of the last batches may trail their replies.
	for range 50 {
		if t.allDone() {
			break
		}
		_ = bus.Sleep(ctx, 200*time.Millisecond)
	}
	stopRun()
	logf("stopping the deployment")
	stopDeploy()
	counts, err := readEffects(d.effects)
	if err != nil {
		return nil, err
	}
	rep := t.report(counts, faults, elapsed)
	rep.NATS, rep.Prefix, rep.Binaries = d.url, o.Prefix, from
	if d.cluster != nil {
		rep.NATS = "3-node cluster in the soak process, replicas 3: " + d.url
	}
	return rep, ctx.Err()
}

// waitSoakLive waits until a router sees every tool of the soak with all
// its workers live.
func waitSoakLive(ctx context.Context, cl *client.Client) error {
	want := map[string]int{soakExternalTool: 0}
	for _, k := range soakKinds {
		if k.tool != soakExternalTool {
			want[k.tool] = soakWorkers
		}
	}
	err := bench.Poll(ctx, soakReady, 200*time.Millisecond, func() error {
		var st bus.Status
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := cl.Admin(actx, "status", "", nil, &st); err != nil {
			return err
		}
		got := map[string]int{}
		for _, ts := range st.Tools {
			if ts.External == (ts.Name == soakExternalTool) {
				got[ts.Name] = ts.LiveWorkers
			}
		}
		var missing []string
		for tool, n := range want {
			if have, ok := got[tool]; !ok || have < n {
				missing = append(missing, fmt.Sprintf("%s (%d of %d workers)", tool, have, n))
			}
		}
		if len(missing) == 0 {
			return nil
		}
		slices.Sort(missing)
		return errors.New("not live: " + strings.Join(missing, ", ") + " (a toolworker without the effect tools of $TOOLWORKER_EFFECTS_FILE is an older build)")
	})
	if err != nil {
		return fmt.Errorf("soak: the deployment did not come up within %v: %w", soakReady, err)
	}
	return nil
}

// readEffects counts the effect records per call key.
func readEffects(path string) (map[string][]string, error) {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	out := map[string][]string{}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSuffix(line, "\n")
		var rec struct {
			Key string `json:"key"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Key == "" {
			continue // a line cut by a kill: no effect to count
		}
		out[rec.Key] = append(out[rec.Key], line)
	}
	return out, nil
}

// allDone reports whether no finished batch lacks its batch.done event.
func (t *soakTracker) allDone() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !slices.ContainsFunc(t.list, doneMissing)
}

// doneMissing reports whether every call of b has its final result and no
// batch.done event came.
func doneMissing(b *soakBatch) bool {
	return !b.done && !slices.ContainsFunc(b.calls, func(c *soakCall) bool { return c.final == nil })
}

// unawaited reports whether b's batch.done may have gone out unawaited
// (protocol 3.4): none of its calls parks or is durable. Such a batch.done
// published while the events stream takes no writes may be missing.
func unawaited(b *soakBatch) bool {
	return !slices.ContainsFunc(b.calls, func(c *soakCall) bool { return c.kind.park != "" || c.kind.durable })
}

// duringFault reports whether b's last result came while a fault was on:
// from 2 s before it began to 5 s after its replacement served again.
func (t *soakTracker) duringFault(b *soakBatch, faults []soakFault) bool {
	var last time.Time
	for _, c := range b.calls {
		if c.finalAt.After(last) {
			last = c.finalAt
		}
	}
	at := last.Sub(t.start).Milliseconds()
	return slices.ContainsFunc(faults, func(f soakFault) bool { return at >= f.AtMS-2000 && at <= f.AtMS+f.DownMS+5000 })
}

// report counts; effects holds the effect records per call key.
func (t *soakTracker) report(effects map[string][]string, faults []soakFault, elapsed time.Duration) *Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	rep := &Report{Faults: append([]soakFault{}, faults...), Errors: map[string]int{}, ByKind: map[string]*soakKindReport{},
		DurationS: elapsed.Round(time.Millisecond).Seconds(), Problems: []soakProblem{}}
	for _, k := range soakKinds {
		rep.ByKind[k.name] = &soakKindReport{}
	}
	sessions := map[string]bool{}
	var lat []time.Duration
	for _, b := range t.list {
		rep.Batches++
		rep.Resends += max(0, b.sends-1)
		sessions[b.session] = true
		switch {
		case !doneMissing(b):
		case unawaited(b) && t.duringFault(b, faults):
			rep.BatchDoneUnstored++ // protocol 3.4 allows it: such a batch is safe to re-send
		default:
			rep.BatchDoneMissing++
			for _, c := range b.calls {
				t.problem(rep, c, "its batch completed but no batch.done event came")
			}
		}
	}
	rep.Sessions = len(sessions)
	for _, c := range t.order {
		k := rep.ByKind[c.kind.name]
		rep.Calls, k.Calls = rep.Calls+1, k.Calls+1
		recs := effects[c.key]
		for _, r := range recs {
			t.step(c, "effects file: %s", r)
			if strings.Contains(r, `"repeat":true`) {
				rep.DurableReruns++ // a redelivered durable run that found its effect done
				continue
			}
			c.effects++
		}
		rep.Effects += c.effects
		var dup []string
		if c.effects > 1 {
			dup = append(dup, fmt.Sprintf("its side effect ran %d times", c.effects))
		}
		if c.kind.once && len(c.seen) > 1 {
			var all []string
			for s, from := range c.seen {
				all = append(all, fmt.Sprintf("%q (first in %s)", clip(s), from))
			}
			slices.Sort(all)
			dup = append(dup, "it was given different results: "+strings.Join(all, " and "))
		}
		if len(dup) > 0 {
			rep.Duplicated, k.Duplicated = rep.Duplicated+1, k.Duplicated+1
			t.problem(rep, c, "duplicated: "+strings.Join(dup, "; "))
		}
		if c.final == nil {
			rep.Lost, k.Lost = rep.Lost+1, k.Lost+1
			what := "lost: no final result"
			if c.kind.park != "" && !c.answered.IsZero() {
				rep.ParkedLost++
				what = "parked lost: answered, never completed"
			}
			t.problem(rep, c, what)
			continue
		}
		rep.Completed, k.Completed = rep.Completed+1, k.Completed+1
		r, code := c.final, c.final.State
		if r.Error != nil {
			code = r.Error.Code
		}
		wrong := ""
		switch {
		case r.State == bus.StateSuccess && summary(*r) != "success/: "+c.want:
			wrong = fmt.Sprintf("wrong result: want %q", c.want)
		case r.State == bus.StateSuccess && c.kind.effect && c.effects == 0:
			wrong = "success without its side effect"
		case r.State == bus.StateSuccess:
			rep.Succeeded, k.Succeeded = rep.Succeeded+1, k.Succeeded+1
		case code == bus.CodeUnknownOutcome && c.kind.durable:
			wrong = "unknown_outcome for a durable call (its call should have gone to another worker)"
		case code == bus.CodeUnknownOutcome && c.effects > 0:
			rep.UnknownRan++
		case code != bus.CodeUnknownOutcome && code != bus.CodeTimeout: // neither a fault's honest outcome nor a success
			wrong = "unexpected error result " + code
		}
		if r.State != bus.StateSuccess {
			rep.Errors[code]++
		}
		if wrong != "" {
			rep.WrongResults++
			t.problem(rep, c, wrong)
		}
		d := c.finalAt.Sub(c.batch.first)
		k.lat = append(k.lat, d)
		if c.kind.park == "" {
			lat = append(lat, d)
		}
	}
	rep.HandoffMissed = t.handoffMissed
	rep.P50MS, rep.P99MS = percentiles(lat)
	for _, k := range rep.ByKind {
		k.P50MS, k.P99MS = percentiles(k.lat)
	}
	return rep
}

// problem lists c (up to soakMaxProblems) with its trail; t.mu is held.
func (t *soakTracker) problem(rep *Report, c *soakCall, what string) {
	if len(rep.Problems) >= soakMaxProblems {
		return
	}
	p := soakProblem{Call: c.key, Kind: c.kind.name, What: what}
	p.Trail = append(p.Trail, fmt.Sprintf("%8.3fs batch first sent (%d calls, sent %d times)", c.batch.first.Sub(t.start).Seconds(), len(c.batch.calls), c.batch.sends))
	for _, s := range c.trail {
		p.Trail = append(p.Trail, fmt.Sprintf("%8.3fs %s", s.at.Seconds(), s.what))
	}
	rep.Problems = append(rep.Problems, p)
}

// percentiles returns the 50th and 99th percentile (nearest rank) in
// milliseconds.
func percentiles(d []time.Duration) (p50, p99 float64) {
	slices.Sort(d)
	ms := func(q float64) float64 { return float64(bench.Latencies(d).Quantile(q).Microseconds()) / 1000 }
	return ms(0.5), ms(0.99)
}

// WriteTable prints the report as text.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "soak: %.0f s on %s (prefix %s, binaries %s)\n", r.DurationS, r.NATS, r.Prefix, r.Binaries)
	fmt.Fprintf(w, "  calls %d in %d batches over %d sessions (%d re-sends): completed %d, succeeded %d\n",
		r.Calls, r.Batches, r.Sessions, r.Resends, r.Completed, r.Succeeded)
	fmt.Fprintf(w, "  lost %d, duplicated %d, parked lost %d, wrong results %d, batches without batch.done %d (and %d unawaited ones during faults, which 3.4 allows)\n",
		r.Lost, r.Duplicated, r.ParkedLost, r.WrongResults, r.BatchDoneMissing, r.BatchDoneUnstored)
	fmt.Fprintf(w, "  errors %v; unknown outcomes whose effect happened %d; missed handoffs %d; effects %d; durable re-runs %d\n",
		r.Errors, r.UnknownRan, r.HandoffMissed, r.Effects, r.DurableReruns)
	fmt.Fprintf(w, "  latency p50 %.1f ms, p99 %.1f ms (calls that do not park)\n", r.P50MS, r.P99MS)
	for _, name := range slices.Sorted(maps.Keys(r.ByKind)) {
		k := r.ByKind[name]
		fmt.Fprintf(w, "    %-16s calls %6d  completed %6d  succeeded %6d  lost %d  duplicated %d  p50 %7.1f ms  p99 %8.1f ms\n",
			name, k.Calls, k.Completed, k.Succeeded, k.Lost, k.Duplicated, k.P50MS, k.P99MS)
	}
	fmt.Fprintf(w, "  faults (%d):\n", len(r.Faults))
	for _, f := range r.Faults {
		fmt.Fprintf(w, "    %7.1fs %-15s %s, down %d ms %s\n", float64(f.AtMS)/1000, f.Kind, f.Target, f.DownMS, f.Error)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  problem %s (%s): %s\n", p.Call, p.Kind, p.What)
		for _, s := range p.Trail {
			fmt.Fprintf(w, "      %s\n", s)
		}
	}
	if r.WorkDir != "" {
		fmt.Fprintf(w, "  work directory (logs, effects file): %s\n", r.WorkDir)
	}
}

// The soak's deployment: NATS, 2 routers and 3 toolworkers, each restarted
// after it is killed; one fault at a time.

const (
	soakRouters = 2
	soakWorkers = 3
	// soakHeartbeat is the routers' and workers' heartbeat: a killed worker
	// is gone after three missed beats, its calls ended after about six.
	soakHeartbeat = 2 * time.Second
	// soakWorkAckWait is the routers' --work-ack-wait: a durable call whose
	// worker was killed goes to another worker after it.
	soakWorkAckWait = 5 * time.Second
	// soakReady bounds a process's start (its "serving" line).
	soakReady = 60 * time.Second
	// soakStopWait bounds a SIGTERM drain at the end before SIGKILL.
	soakStopWait = 40 * time.Second
)

// soakProc is one router or worker slot; each restart is a new generation
// with its own id (soak-r0-1, soak-w2-3, ...).
type soakProc struct {
	role string // "router" or "worker"
	slot int
	bin  string
	args func(id string) []string
	env  []string
	log  string // output of every generation, appended

	mu  sync.Mutex
	gen int
	id  string
	p   *bench.Process // the current generation
}

// start runs the next generation and waits for its "serving" line.
func (p *soakProc) start(ctx context.Context) error {
	p.mu.Lock()
	p.gen++
	id := fmt.Sprintf("soak-%c%d-%d", p.role[0], p.slot, p.gen)
	p.mu.Unlock()
	logf, err := os.OpenFile(p.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== %s %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), id, strings.Join(p.args(id), " "))
	proc, err := bench.StartProcess(ctx, bench.ProcessSpec{Path: p.bin, Args: p.args(id), Env: p.env, Log: logf, Bound: soakReady,
		Ready: func(line string) (string, bool) { return "", strings.Contains(line, " serving ") }})
	if err != nil {
		logf.Close()
		return fmt.Errorf("%s: %w (log %s)", id, err, p.log)
	}
	go func() {
		<-proc.Done()
		fmt.Fprintf(logf, "=== %s %s exited: %v\n", time.Now().UTC().Format(time.RFC3339Nano), id, proc.State())
		logf.Close()
	}()
	p.mu.Lock()
	p.id, p.p = id, proc
	p.mu.Unlock()
	return nil
}

// current returns the running generation's id and process.
func (p *soakProc) current() (string, *bench.Process) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.id, p.p
}

// kill sends SIGKILL to the running generation and waits for it to exit.
func (p *soakProc) kill() (id string, pid int, err error) {
	id, proc := p.current()
	if proc == nil {
		return id, 0, fmt.Errorf("%s is not running", id)
	}
	return id, proc.Pid(), proc.Kill()
}

// stop ends the running generation: SIGTERM (a drain), then SIGKILL after
// soakStopWait.
func (p *soakProc) stop() {
	_, proc := p.current()
	ctx, cancel := context.WithTimeout(context.Background(), soakStopWait)
	defer cancel()
	_ = proc.Stop(ctx)
}

// soakDeploy is the deployment under test.
type soakDeploy struct {
	url     string
	prefix  string
	cluster *embedded.Cluster // nil when joining --nats
	routers []*soakProc
	workers []*soakProc
	effects string // the effect tools' record file
}

// startSoakDeploy starts NATS (unless url is given), the routers and the
// workers.
func startSoakDeploy(ctx context.Context, o *Options, routerBin, workerBin string, logf func(string, ...any)) (d *soakDeploy, err error) {
	d = &soakDeploy{url: o.NATSURL, prefix: o.Prefix, effects: filepath.Join(o.Dir, "effects.jsonl")}
	defer func() {
		if err != nil {
			d.stop()
		}
	}()
	if d.url == "" {
		logf("starting a 3-node NATS cluster (JetStream, stores in %s)", filepath.Join(o.Dir, "nats"))
		ready, cancel := context.WithTimeout(ctx, embedded.ClusterReady)
		d.cluster, err = embedded.StartCluster(ready, embedded.ClusterConfig{MaxStore: embedded.Roomy, Dir: filepath.Join(o.Dir, "nats"), Name: "soak"})
		if cancel(); err != nil {
			return nil, err
		}
		d.url = d.cluster.URLs(0)
	}
	hb := soakHeartbeat.String()
	env := childEnv(o, d.cluster == nil)
	for i := range soakRouters {
		d.routers = append(d.routers, &soakProc{role: "router", slot: i, bin: routerBin,
			log: filepath.Join(o.Dir, fmt.Sprintf("router%d.log", i)), env: env,
			args: func(id string) []string {
				return []string{"--nats", d.urlFrom(i), "--prefix", d.prefix, "--replicas", strconv.Itoa(o.Replicas),
					"--heartbeat", hb, "--work-ack-wait", soakWorkAckWait.String(), "--builtin=false", "--id", id}
			}})
	}
	for i := range soakWorkers {
		d.workers = append(d.workers, &soakProc{role: "worker", slot: i, bin: workerBin,
			log: filepath.Join(o.Dir, fmt.Sprintf("worker%d.log", i)),
			env: append(slices.Clone(env), "TOOLWORKER_EFFECTS_FILE="+d.effects),
			args: func(id string) []string {
				return []string{"--nats", d.urlFrom(i + 1), "--prefix", d.prefix, "--heartbeat", hb, "--id", id}
			}})
	}
	// The first router creates the buckets and streams; the others find them.
	for _, p := range append(append([]*soakProc{}, d.routers...), d.workers...) {
		logf("starting %s %d", p.role, p.slot)
		if err := p.start(ctx); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// childEnv is this process's environment without the nats CLI's variables;
// joining --nats, the soak's credentials and TLS flags go through them.
func childEnv(o *Options, joining bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NATS_") {
			env = append(env, kv)
		}
	}
	if joining {
		c := o.Conn
		for _, v := range [][2]string{{natsconn.EnvCreds, c.Creds}, {natsconn.EnvNKey, c.NKey}, {natsconn.EnvUser, c.User},
			{natsconn.EnvPassword, c.Password}, {natsconn.EnvToken, c.Token}, {natsconn.EnvCA, c.CA},
			{natsconn.EnvCert, c.Cert}, {natsconn.EnvKey, c.Key}} {
			if v[1] != "" {
				env = append(env, v[0]+"="+v[1])
			}
		}
	}
	return env
}

// urlFrom lists the cluster's URLs starting at node i, so the processes
// spread over the nodes; a --nats URL is used as given.
func (d *soakDeploy) urlFrom(i int) string {
	if d.cluster == nil {
		return d.url
	}
	return d.cluster.URLs(i % d.cluster.Nodes())
}

// stop ends every process, then the cluster.
func (d *soakDeploy) stop() {
	var wg sync.WaitGroup
	for _, p := range append(append([]*soakProc{}, d.routers...), d.workers...) {
		wg.Go(p.stop)
	}
	wg.Wait()
	if d.cluster != nil {
		_ = d.cluster.Stop(context.Background())
	}
}

// soakFault is one injected fault, as reported.
type soakFault struct {
	AtMS   int64  `json:"at_ms"`   // since the load started
	Kind   string `json:"kind"`    // kill_worker, kill_router, stop_nats_node
	Target string `json:"target"`  // the process id and pid, or the node and why it was chosen
	DownMS int64  `json:"down_ms"` // from the kill to the replacement serving again
	Error  string `json:"error,omitempty"`
}

// inject runs fault number n (kind by n, target by how many of that kind
// came before) and returns it once the victim is back.
func (d *soakDeploy) inject(ctx context.Context, n int, start time.Time, down time.Duration) soakFault {
	kinds := []string{"kill_worker", "kill_router", "stop_nats_node"} // round robin
	if d.cluster == nil {
		kinds = kinds[:2] // no NATS faults on --nats
	}
	kind, k := kinds[n%len(kinds)], n/len(kinds)
	f := soakFault{AtMS: time.Since(start).Milliseconds(), Kind: kind}
	t0 := time.Now()
	var err error
	switch kind {
	case "kill_worker", "kill_router":
		procs := d.workers
		if kind == "kill_router" {
			procs = d.routers
		}
		p := procs[k%len(procs)]
		id, pid, kerr := p.kill()
		f.Target = fmt.Sprintf("%s (pid %d, SIGKILL)", id, pid)
		if err = kerr; err == nil {
			_ = bus.Sleep(ctx, down)
			err = p.start(context.WithoutCancel(ctx))
		}
	case "stop_nats_node":
		// The streams whose leader a NATS fault stops, in turn.
		s := bus.NewSubjects(d.prefix)
		streams := []string{"KV_" + s.Bucket(bus.BucketLedger), "KV_" + s.Bucket(bus.BucketParked), s.Stream(bus.StreamEvents),
			"KV_" + s.Bucket(bus.BucketSessions)}
		stream := streams[k%len(streams)]
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		node, lerr := d.cluster.WaitStreamLeader(wctx, stream)
		cancel()
		if lerr != nil {
			node = k % d.cluster.Nodes()
			f.Target = fmt.Sprintf("n%d (%s has no leader: %v)", node, stream, lerr)
		} else {
			f.Target = fmt.Sprintf("n%d (leader of %s)", node, stream)
		}
		d.cluster.StopNode(node)
		_ = bus.Sleep(ctx, 2*down)
		if err = d.cluster.Start(node); err == nil {
			// The next fault once every node is healthy (docs/operations.md);
			// the fault's own bound, not the soak's: a fault begun before the
			// end is restored before the soak counts.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			err = d.cluster.WaitHealthy(wctx)
			cancel()
		}
	}
	f.DownMS = time.Since(t0).Milliseconds()
	if err != nil {
		f.Error = err.Error()
	}
	return f
}
