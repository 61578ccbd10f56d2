package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// TestLongCallsDoNotHoldOthers: calls run on the goroutine that read their
// request (docs/worker.md, "the hand-off"), yet calls that do not return
// hold up only their own slots: with three of four slots held, forty
// short calls are answered; the fourth slot taken, a fifth long call
// waits for a slot and runs once one frees.
func TestLongCallsDoNotHoldOthers(t *testing.T) {
	f := newFixture(t, true)
	g := newGate()
	obs := &waits{}
	f.startWorker(worker.Config{MaxConcurrent: 4, Observer: obs}, func(w *worker.Worker) {
		raw(t, w, "slow", g.handler)
		raw(t, w, "fast", func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textOut("fast"), nil })
	})
	var slow []*pending
	for i := range 3 {
		slow = append(slow, f.send(t, execEvent(t, "slow", "s"+strconv.Itoa(i), `{}`), "slow"))
		<-g.entered
	}
	var fast []*pending
	for i := range 40 {
		fast = append(fast, f.send(t, execEvent(t, "fast", "f"+strconv.Itoa(i), `{}`), "fast"))
	}
	for _, p := range fast {
		wantText(t, p.wait(), bus.StateSuccess, "fast")
	}
	slow = append(slow, f.send(t, execEvent(t, "slow", "s3", `{}`), "slow"))
	<-g.entered
	slow = append(slow, f.send(t, execEvent(t, "slow", "s4", `{}`), "slow"))
	// Four calls hold the four slots: the fifth waits, and a short call
	// waits too. Nothing is answered until a slot frees.
	late := f.send(t, execEvent(t, "fast", "f40", `{}`), "fast")
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		if n := obs.n.Load(); n != 2 {
			return fmt.Errorf("%d calls wait for a slot, want 2", n)
		}
		return nil
	})
	select {
	case id := <-g.entered:
		t.Fatalf("call %s ran past the worker's 4 slots", id)
	default:
	}
	if late.replied() {
		t.Fatal("a call was answered past the worker's 4 slots")
	}
	close(g.release)
	for _, p := range slow {
		if res := p.wait(); res.State != bus.StateSuccess {
			t.Fatalf("slow call: %+v", res)
		}
	}
	wantText(t, late.wait(), bus.StateSuccess, "fast")
	if m := g.max.Load(); m != 4 {
		t.Fatalf("%d slow calls ran at once, want 4", m)
	}
}

// waits is an Observer that counts the calls waiting for a slot.
type waits struct{ n atomic.Int64 }

func (o *waits) Waiting(d int)                        { o.n.Add(int64(d)) }
func (*waits) Running(int)                            {}
func (*waits) Finished(string, string, time.Duration) {}

// TestDiscoveryAnswered: the worker answers NATS micro discovery as a
// micro service did (`nats micro ls/info/stats`, `toolbus status`) on
// each of the three subjects of each verb: its identity, each tool it
// serves as an endpoint with its subject, queue group and metadata, and
// the endpoint's counts; a tool the routers reject leaves the listing, and
// a stopped worker answers no more.
func TestDiscoveryAnswered(t *testing.T) {
	f := newFixture(t, true)
	w := f.startWorker(worker.Config{ID: "w7", Version: "2.1.0", Heartbeat: 50 * time.Millisecond}, func(w *worker.Worker) {
		raw(t, w, "alpha", func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textOut("a"), nil })
		raw(t, w, "beta", func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return nil, fmt.Errorf("beta fails")
		})
	})
	f.exec(t, execEvent(t, "alpha", "c1", `{}`), "alpha")
	f.exec(t, execEvent(t, "alpha", "c2", `{}`), "alpha")
	f.exec(t, execEvent(t, "beta", "c3", `{}`), "beta")

	ask := func(verb micro.Verb, kind, id string, v any) error { return askDiscovery(t, f.nc, verb, kind, id, v) }
	var ping micro.Ping
	if err := ask(micro.PingVerb, "", "", &ping); err != nil {
		t.Fatal(err)
	}
	if ping.Type != micro.PingResponseType || ping.Name != "toolbus-worker" || ping.Version != "2.1.0" ||
		ping.Metadata["worker"] != "w7" || ping.Metadata["prefix"] != f.subj.Prefix || ping.ID == "" {
		t.Fatalf("ping %+v", ping)
	}
	for _, who := range [][2]string{{"", ""}, {"toolbus-worker", ""}, {"toolbus-worker", ping.ID}} {
		var info micro.Info
		if err := ask(micro.InfoVerb, who[0], who[1], &info); err != nil {
			t.Fatal(who, err)
		}
		var eps []string
		for _, ep := range info.Endpoints {
			eps = append(eps, ep.Name+"@"+ep.Subject+"#"+ep.QueueGroup+" "+ep.Metadata["read_only"])
		}
		if want := []string{"alpha@toolbus.exec.alpha#toolbus-exec-alpha false", "beta@toolbus.exec.beta#toolbus-exec-beta false"}; !slices.Equal(eps, want) ||
			info.Type != micro.InfoResponseType || info.ID != ping.ID || info.Description != "toolbus worker w7" {
			t.Fatalf("info %v: %+v", who, info)
		}
		var stats micro.Stats
		if err := ask(micro.StatsVerb, who[0], who[1], &stats); err != nil {
			t.Fatal(who, err)
		}
		got := map[string]string{}
		for _, ep := range stats.Endpoints {
			got[ep.Name] = fmt.Sprintf("%d requests, %d errors, data %s", ep.NumRequests, ep.NumErrors, ep.Data)
		}
		if stats.Type != micro.StatsResponseType || stats.Started.IsZero() ||
			!regexp.MustCompile(`^2 requests, 0 errors, data \{"calls":2,"errors":0,"average_run_ms":[0-9.e-]+\}$`).MatchString(got["alpha"]) ||
			!regexp.MustCompile(`^1 requests, 1 errors, data \{"calls":1,"errors":1,"average_run_ms":[0-9.e-]+\}$`).MatchString(got["beta"]) {
			t.Fatalf("stats %v: %v", who, got)
		}
	}

	// beta rejected: it leaves the listing at once.
	f.reg.setRespond(rejecting("beta"))
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		var info micro.Info
		if err := ask(micro.InfoVerb, "toolbus-worker", ping.ID, &info); err != nil {
			return err
		}
		if len(info.Endpoints) != 1 || info.Endpoints[0].Name != "alpha" {
			return fmt.Errorf("endpoints %+v", info.Endpoints)
		}
		return nil
	})

	if err := w.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := ask(micro.PingVerb, "toolbus-worker", ping.ID, &ping); !errNoResponders(err) {
		t.Fatalf("a stopped worker answered discovery: %v", err)
	}
}

// TestTwoWorkersOneConnection: two workers on one connection (a bridge's,
// one per MCP server) answer a discovery request once, as one instance
// listing both workers' tools: a connection the server delivers a request
// twice may answer it not at all under allow_responses (session 39: the
// operator saw none of a two-server bridge's tools). The one left after
// the other stops answers alone, and with both stopped nothing answers.
func TestTwoWorkersOneConnection(t *testing.T) {
	f := newFixture(t, true)
	nc := testkit.Connect(t, f.srv)
	start := func(id, tool string) *worker.Worker {
		w, err := worker.New(nc, worker.Config{ID: id, Heartbeat: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		raw(t, w, tool, func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textOut(tool), nil })
		if err := w.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, w.Registered(), id+" registered")
		return w
	}
	a, b := start("a", "alpha"), start("b", "beta")
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	listed := func(want []string, workers string) {
		t.Helper()
		var info micro.Info
		if err := askDiscovery(t, f.nc, micro.InfoVerb, "toolbus-worker", "", &info); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, ep := range info.Endpoints {
			names = append(names, ep.Name)
		}
		if !slices.Equal(names, want) || info.Metadata["worker"] != workers || info.Description != "toolbus worker "+workers {
			t.Fatalf("one answer listed %v of %q (%s), want %v of %q", names, info.Metadata["worker"], info.Description, want, workers)
		}
	}
	listed([]string{"alpha", "beta"}, "a,b")
	if err := a.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	listed([]string{"beta"}, "b")
	if err := b.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.nc.Request("$SRV.PING", nil, bound); !errNoResponders(err) {
		t.Fatalf("two stopped workers answered discovery: %v", err)
	}
}

// askDiscovery asks verb of the micro service kind (and instance id) on nc
// and decodes the first answer into v.
func askDiscovery(t *testing.T, nc *nats.Conn, verb micro.Verb, kind, id string, v any) error {
	t.Helper()
	subj, err := micro.ControlSubject(verb, kind, id)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := nc.Request(subj, nil, bound)
	if err != nil {
		return err
	}
	return json.Unmarshal(resp.Data, v)
}
