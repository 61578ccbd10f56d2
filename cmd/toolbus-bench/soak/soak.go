// Package soak runs toolbus under load with faults (docs/operations.md,
// "Soak"): two routers and three toolworkers as processes on a 3-node
// cluster, agents that behave as docs/protocol.md says, and counters of what
// was lost, duplicated or wrong. `toolbus soak` is a thin caller.
package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bench"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
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
	soakKindReport                              // every call's (p50_ms, p99_ms: of those that do not park)
	ParkedLost       int                        `json:"parked_lost"`
	Faults           []soakFault                `json:"faults"`
	DurationS        float64                    `json:"duration_s"`
	Batches          int                        `json:"batches"`
	Sessions         int                        `json:"sessions"`
	Resends          int                        `json:"resends"`
	Errors           map[string]int             `json:"errors"`
	UnknownRan       int                        `json:"unknown_outcome_ran"`
	HandoffMissed    int                        `json:"handoff_missed"`
	BatchDoneMissing int                        `json:"batch_done_missing"`
	WrongResults     int                        `json:"wrong_results"`
	Effects          int                        `json:"effects"`
	DurableReruns    int                        `json:"durable_reruns"`
	ByKind           map[string]*soakKindReport `json:"by_kind"`
	Problems         []soakProblem              `json:"problems"`
	NATS             string                     `json:"nats"`
	Prefix           string                     `json:"prefix"`
	Binaries         string                     `json:"binaries"`
	WorkDir          string                     `json:"work_dir,omitempty"`
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
	bins, err := findSoakBinaries(ctx, o.Bin, o.Dir, logf)
	if err != nil {
		return nil, err
	}
	logf("router %s, toolworker %s (%s)", bins.router, bins.worker, bins.from)
	d, err := startSoakDeploy(ctx, o, bins, logf)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			d.stop()
		}
	}()
	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	cfg := natsconn.Config{URLs: d.url}
	if d.cluster == nil {
		cfg = o.Conn
		cfg.URLs = d.url
	}
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
	hw, err := worker.New(hnc, worker.Config{Prefix: o.Prefix, Heartbeat: soakHeartbeat})
	if err != nil {
		return nil, err
	}
	err = worker.Register(hw, bus.ToolDef{Name: soakExternalTool, Description: "Ask the soak's approver (external).",
		External: true, ConcurrencySafe: true, Permission: bus.PermissionAllow},
		func(context.Context, *worker.Call, struct{}) (string, error) {
			return "", errors.New("external: never run")
		})
	if err != nil {
		return nil, err
	}
	if err := hw.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = hw.Stop(context.WithoutCancel(ctx)) }()
	cl := client.New(hnc, client.Config{Prefix: o.Prefix, Source: "soak/approver"})
	if err := waitSoakLive(ctx, cl); err != nil {
		return nil, err
	}
	logf("deployment live: %d routers, %d workers on %s, prefix %s", soakRouters, soakWorkers, d.url, o.Prefix)

	t := newSoakTracker()
	l := &soakLoad{o: o, t: t, subj: bus.NewSubjects(o.Prefix), run: fmt.Sprintf("%08x", rand.Uint32())}
	runCtx, stopRun := context.WithCancel(ctx) // consumers and the approver, until the counting
	defer stopRun()
	l.appr = &soakApprover{l: l, cl: cl, ctx: runCtx, rand: rand.New(rand.NewPCG(7, uint64(t.start.UnixNano())))}
	enc, err := connect("events")
	if err != nil {
		return nil, err
	}
	if err := l.events(runCtx, enc); err != nil {
		return nil, err
	}
	if err := l.appr.follow(runCtx, hnc); err != nil {
		return nil, err
	}

	agents := make([]*soakAgent, o.Agents)
	for i := range agents {
		nc, err := connect(fmt.Sprintf("agent%d", i))
		if err != nil {
			return nil, err
		}
		agents[i] = l.newAgent(i, nc)
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
			sleepCtx(loadCtx, o.FaultEvery)
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
		sleepCtx(loadCtx, time.Duration(20+agents[i].r.IntN(180))*time.Millisecond)
		return nil
	})
	<-fdone
	elapsed := time.Since(t.start)
	// batch.done events of the last batches may trail their replies.
	for range 50 {
		if missingBatchDone(t) == 0 {
			break
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	stopRun()
	logf("stopping the deployment")
	d.stop()
	stopped = true
	counts, err := readEffects(d.effects)
	if err != nil {
		return nil, err
	}
	rep := t.report(counts, faults, elapsed)
	rep.NATS, rep.Prefix, rep.Binaries = d.url, o.Prefix, bins.from
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
		sort.Strings(missing)
		return errors.New("not live: " + strings.Join(missing, ", ") + " (a toolworker without the effect tools of $TOOLWORKER_EFFECTS_FILE is an older build)")
	})
	if err != nil {
		return fmt.Errorf("soak: the deployment did not come up within %v: %w", soakReady, err)
	}
	return nil
}

// readEffects counts the effect records per call key.
func readEffects(path string) (map[string][]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string][]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec struct {
			Key string `json:"key"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Key == "" {
			continue // a line cut by a kill: no effect to count
		}
		out[rec.Key] = append(out[rec.Key], sc.Text())
	}
	return out, sc.Err()
}

// missingBatchDone counts finished batches without a batch.done event.
func missingBatchDone(t *soakTracker) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, b := range t.list {
		if !b.done && batchFinal(b) {
			n++
		}
	}
	return n
}

func batchFinal(b *soakBatch) bool {
	for _, c := range b.calls {
		if c.final == nil {
			return false
		}
	}
	return true
}

// report counts; effects holds the effect records per call key.
func (t *soakTracker) report(effects map[string][]string, faults []soakFault, elapsed time.Duration) *Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	rep := &Report{Faults: faults, Errors: map[string]int{}, ByKind: map[string]*soakKindReport{},
		DurationS: elapsed.Round(time.Millisecond).Seconds(), Problems: []soakProblem{}}
	if rep.Faults == nil {
		rep.Faults = []soakFault{}
	}
	for _, k := range soakKinds {
		rep.ByKind[k.name] = &soakKindReport{}
	}
	sessions := map[string]bool{}
	var lat []time.Duration
	for _, b := range t.list {
		rep.Batches++
		rep.Resends += max(0, b.sends-1)
		sessions[b.session] = true
		if !b.done && batchFinal(b) {
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
		r := c.final
		if r.State == bus.StateSuccess {
			if summary(*r) != "success/: "+c.want {
				rep.WrongResults++
				t.problem(rep, c, fmt.Sprintf("wrong result: want %q", c.want))
			} else if c.kind.effect && c.effects == 0 {
				rep.WrongResults++
				t.problem(rep, c, "success without its side effect")
			} else {
				rep.Succeeded, k.Succeeded = rep.Succeeded+1, k.Succeeded+1
			}
		} else {
			code := r.State
			if r.Error != nil {
				code = r.Error.Code
			}
			rep.Errors[code]++
			switch {
			case code == bus.CodeUnknownOutcome && c.kind.durable:
				rep.WrongResults++
				t.problem(rep, c, "unknown_outcome for a durable call (its call should have gone to another worker)")
			case code == bus.CodeUnknownOutcome:
				if c.effects > 0 {
					rep.UnknownRan++
				}
			case code == bus.CodeTimeout:
			default: // neither a fault's honest outcome nor a success
				rep.WrongResults++
				t.problem(rep, c, "unexpected error result "+code)
			}
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

// Write prints the report as text.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "soak: %.0f s on %s (prefix %s, binaries %s)\n", r.DurationS, r.NATS, r.Prefix, r.Binaries)
	fmt.Fprintf(w, "  calls %d in %d batches over %d sessions (%d re-sends): completed %d, succeeded %d\n",
		r.Calls, r.Batches, r.Sessions, r.Resends, r.Completed, r.Succeeded)
	fmt.Fprintf(w, "  lost %d, duplicated %d, parked lost %d, wrong results %d, batches without batch.done %d\n",
		r.Lost, r.Duplicated, r.ParkedLost, r.WrongResults, r.BatchDoneMissing)
	fmt.Fprintf(w, "  errors %v; unknown outcomes whose effect happened %d; missed handoffs %d; effects %d; durable re-runs %d\n",
		r.Errors, r.UnknownRan, r.HandoffMissed, r.Effects, r.DurableReruns)
	fmt.Fprintf(w, "  latency p50 %.1f ms, p99 %.1f ms (calls that do not park)\n", r.P50MS, r.P99MS)
	kinds := make([]string, 0, len(r.ByKind))
	for k := range r.ByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, name := range kinds {
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
