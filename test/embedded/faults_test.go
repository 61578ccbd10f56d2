package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// The fault tests run on a 3-node cluster with replicas 3 (their names
// start with TestCluster; they call newClusterEnv) and count what a fault
// lost, ran twice or answered two ways. All of it must be zero.

// newClusterEnv is newEnv on a 3-node cluster, whatever the test's name.
func newClusterEnv(t *testing.T, routers int) *env {
	t.Helper()
	return startEnv(t, routers, true, router.Config{})
}

// stored reads every event the events stream holds for session ("*" for
// all), in stream order, as the stream's leader holds them when it is
// called. It asks the leader for each next message on the session's
// subject ($JS.API.STREAM.MSG.GET with next_by_subj: the events stream has
// no direct gets, so no lagging replica answers) until there is none: one
// request per event, no consumer. A consumer read one event per Next, and
// an ordered consumer's every Next creates a new consumer through the
// cluster's meta leader: on a loaded machine 150 of those outlasted the
// read's bound (TestClusterConcurrentAnswers), and a Fetch whose pull
// missed its heartbeat returned no events and no error
// (TestRevisionStoredEvents). It returns an error when a request fails (a
// leader moving while a node stops); callers poll.
func stored(t *testing.T, nc *nats.Conn, session string) ([]*bus.Event, error) {
	t.Helper()
	js := testkit.JetStream(t, nc)
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	s, err := js.Stream(ctx, "TOOLBUS_EVENTS")
	if err != nil {
		return nil, err
	}
	subject := "toolbus.events." + session
	var out []*bus.Event
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("read %d events, then: %w", len(out), err)
		}
		e, err := bus.Decode(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
		seq = m.Sequence + 1
	}
}

// Two answers to the two parked calls of one batch, sent at the same
// moment through routers on different nodes: every batch completes, once.
// Halfway through, the node leading the parked bucket stops, and comes back.
func TestClusterConcurrentAnswers(t *testing.T) {
	e := newClusterEnv(t, 2)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	answerers := []*client.Client{
		client.New(e.connect(t), client.Config{Source: "test/handler-a"}),
		client.New(e.connect(t), client.Config{Source: "test/handler-b"}),
	}
	const batches = 30
	check := newLedgerCheck()
	var stopped = -1
	for i := range batches {
		if i == batches/2 {
			leader, err := e.cluster.WaitStreamLeader(testkit.Within(t, bound), "KV_toolbus_parked")
			if err != nil {
				t.Fatal(err)
			}
			e.cluster.StopNode(leader)
			stopped = leader
		}
		if i == batches/2+5 {
			if err := e.cluster.Start(stopped); err != nil {
				t.Fatal(err)
			}
		}
		reply := "r" + strconv.Itoa(i)
		r, err := callResending(t, e.client, check, "s1", reply, []bus.Call{{ID: "a", Name: "ext"}, {ID: "b", Name: "ext"}})
		if err != nil || len(r.Parked) != 2 {
			t.Fatalf("batch %d: %s", i, jsonOf(r))
		}
		var wg sync.WaitGroup
		for k, id := range []string{"a", "b"} {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 3*bound)
				defer cancel()
				if err := answerers[k].Parked().Answer(ctx, "ext", "s1", reply, id, bus.Answer{State: "success", Output: bus.Text(id + reply)}); err != nil {
					t.Errorf("batch %d: answer %s: %v", i, id, err)
				}
			})
		}
		wg.Wait()
	}
	// Every batch.done is in the stream, once, with both answers: each
	// stored message counts (stored reads the stream, not a consumer's
	// deliveries), and who sent it says why when there are two.
	done := map[string]int{}
	senders := map[string][]string{}
	testkit.CheckFor(t, 3*bound, 50*time.Millisecond, func() error {
		clear(done)
		clear(senders)
		evs, err := stored(t, e.nc, "s1")
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if ev.Type != bus.TypeBatchDone {
				continue
			}
			var bd bus.BatchDone
			if err := ev.DataAs(&bd); err != nil || len(bd.Results) != 2 ||
				textOf(bd.Results[0]) != "a"+ev.ReplyID || textOf(bd.Results[1]) != "b"+ev.ReplyID {
				return fmt.Errorf("batch.done of %s: %s", ev.ReplyID, ev.Data)
			}
			done[ev.ReplyID]++
			senders[ev.ReplyID] = append(senders[ev.ReplyID], ev.Source+" at "+ev.Time+" id "+ev.ID)
		}
		if len(done) != batches {
			return fmt.Errorf("%v: %d of %d batches have their batch.done stored", done, len(done), batches)
		}
		return nil
	})
	// A batch the agent sent once is done once (docs/protocol.md 3.4:
	// batch.done "once, when every call of the reply id has a result"). A
	// copy it sent again, when no reply came within 5 s, publishes its own
	// batch.done when it completes (3.1: "a re-sent batch publishes its
	// call.result events and batch.done again"): one per copy at most.
	for reply, n := range done {
		sends := check.sentTimes("s1/" + reply)
		if sends > 1 {
			t.Logf("batch %s sent %d times, done %d times", reply, sends, n)
		}
		if n > max(sends, 1) {
			t.Errorf("batch %s sent %d times, done %d times: %s", reply, sends, n, strings.Join(senders[reply], "; "))
		}
	}
}

// A router that published a parked batch's batch.done and stopped before
// it removed the continuation (or whose lease lapsed while it removed it,
// a stream leader moving) leaves the continuation resumed under a stale
// lease: another router takes it over and finishes the batch again. The
// batch still has one batch.done in the stream (docs/protocol.md 3.4:
// once, when every call has a result): both finishes publish it under the
// same Nats-Msg-Id, derived from the batch.
func TestTakeoverAfterBatchDoneStoresItOnce(t *testing.T) {
	e := newEnv(t, 2)
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	js := testkit.JetStream(t, e.nc)
	kv, err := js.KeyValue(t.Context(), "toolbus_parked")
	if err != nil {
		t.Fatal(err)
	}
	const reply = "r1"
	e.callParked(t, "s1", reply, bus.Call{ID: "a", Name: "ext"}, bus.Call{ID: "b", Name: "ext"})
	entry, err := kv.Get(t.Context(), "s1."+reply)
	if err != nil {
		t.Fatal(err)
	}
	var cont map[string]any
	if err := json.Unmarshal(entry.Value(), &cont); err != nil {
		t.Fatal(err)
	}
	results := map[string]any{}
	for _, id := range []string{"a", "b"} {
		res := bus.Result{ID: id, Name: "ext", State: bus.StateSuccess, Output: bus.Text(id + reply)}
		if err := e.client.Parked().Answer(t.Context(), "ext", "s1", reply, id, bus.Answer{State: res.State, Output: res.Output}); err != nil {
			t.Fatal(err)
		}
		results[id] = res
	}
	doneCount := func() (int, error) {
		evs, err := stored(t, e.nc, "s1")
		n := 0
		for _, ev := range evs {
			if ev.Type == bus.TypeBatchDone && ev.ReplyID == reply {
				n++
			}
		}
		return n, err
	}
	gone := func() error {
		if _, err := kv.Get(t.Context(), "s1."+reply); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("continuation still there (%v)", err)
		}
		if n, err := doneCount(); err != nil || n == 0 {
			return fmt.Errorf("%d batch.done stored (%v)", n, err)
		}
		return nil
	}
	testkit.CheckFor(t, bound, 10*time.Millisecond, gone)
	// The continuation as the stopped router left it: every result in,
	// resumed by it, its lease long stale.
	cont["results"], cont["phase"], cont["owner"] = results, "resumed", "router-gone"
	cont["touched"] = time.Now().Add(-time.Hour).UTC()
	v, err := json.Marshal(cont)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(t.Context(), "s1."+reply, v); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, bound, 10*time.Millisecond, gone) // taken over, finished, removed
	if n, err := doneCount(); err != nil || n != 1 {
		t.Fatalf("batch.done of %s stored %d times (%v), want once", reply, n, err)
	}
}

// calls counts what a worker ran and what agents were told.
type ledgerCheck struct {
	mu      sync.Mutex
	runs    map[string]int    // session/reply/call → side effects
	results map[string]string // → the one result an agent may see
	changed []string          // calls answered two different ways
	sends   map[string]int    // session/reply → times the agent sent the batch
}

func newLedgerCheck() *ledgerCheck {
	return &ledgerCheck{runs: map[string]int{}, results: map[string]string{}, sends: map[string]int{}}
}

// sent notes that the agent sent batch key (session/reply) once more.
func (l *ledgerCheck) sent(key string) {
	l.mu.Lock()
	l.sends[key]++
	l.mu.Unlock()
}

// sentTimes is how often the agent sent batch key.
func (l *ledgerCheck) sentTimes(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sends[key]
}

func (l *ledgerCheck) ran(key string) {
	l.mu.Lock()
	l.runs[key]++
	l.mu.Unlock()
}

// saw notes a result of key; a different one than before is a change. An
// unavailable result is none: it says nothing ran, and the agent sends the
// batch again.
func (l *ledgerCheck) saw(key string, r bus.Result) {
	if r.Error != nil && r.Error.Code == bus.CodeUnavailable {
		return
	}
	sum := r.State + ":" + textOf(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.results[key]; ok && old != sum {
		l.changed = append(l.changed, fmt.Sprintf("%s: %q then %q", key, old, sum))
	}
	l.results[key] = sum
}

// The nodes leading the ledger, the sessions bucket, the parked bucket and
// the events stream stop, one after the other (each once the cluster is
// healthy again after the one before), then a router dies and a
// worker's connection is cut, while agents call a side-effecting tool and
// re-send their batches on a time-out: no call
// runs twice, none whose worker answered turns into unknown_outcome or
// internal, no call is answered two ways, and every completed batch has
// its batch.done in the stream or, when it is missing (a writing batch's
// batch.done is published unawaited once the ledger holds its writes, and
// one published while the events stream elects a leader is lost:
// docs/protocol.md 3.4, 1.15), is safe to send again: the copy runs
// nothing, gets the same results, and its own batch.done is stored.
func TestClusterLeaderLossWhileCallsRun(t *testing.T) {
	e := newClusterEnv(t, 2)
	check := newLedgerCheck()
	var workerConn *nats.Conn
	for i := range 3 {
		nc := e.connect(t)
		if i == 0 {
			workerConn = nc
		}
		e.addWorkerOn(nc, func(w *worker.Worker) {
			// A short timeout: a re-send that finds a dead router's claim
			// waits for it (and the ledger's grace) before unknown_outcome.
			handle(t, w, bus.ToolDef{Name: "charge", Description: "Charges once.", ConcurrencySafe: true,
				Permission: bus.PermissionAllow, InputSchema: objectSchema(`{}`), TimeoutMS: 5000},
				func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
					check.ran(c.SessionID + "/" + c.ReplyID + "/" + c.ID)
					return textResult("charged " + c.ID), nil
				})
		})
	}
	e.waitLive("charge")
	const agents, batches = 6, 14
	faults := []string{"KV_toolbus_ledger", "KV_toolbus_sessions", "KV_toolbus_parked", "TOOLBUS_EVENTS"}
	var (
		progress atomic.Int32
		wg       sync.WaitGroup
		failures = make(chan error, agents)
	)
	completed := make(map[string]bool)
	var cmu sync.Mutex
	for a := range agents {
		c := client.New(e.connect(t), client.Config{Source: "test/agent" + strconv.Itoa(a)})
		session := "s" + strconv.Itoa(a%3)
		wg.Go(func() {
			for i := range batches {
				reply := fmt.Sprintf("a%d-%d", a, i)
				calls := []bus.Call{{ID: "c1", Name: "charge"}, {ID: "c2", Name: "charge"}}
				r, err := callResending(t, c, check, session, reply, calls)
				if err != nil {
					failures <- fmt.Errorf("batch %s: %w", reply, err)
					return
				}
				for _, res := range r.Results {
					key := session + "/" + reply + "/" + res.ID
					check.saw(key, res)
					// unknown_outcome and timeout: the router does not know
					// whether the call ran (an exec request or its reply
					// was lost with a node, or a router died mid-call).
					if res.State != bus.StateSuccess && !(res.Error != nil && (res.Error.Code == bus.CodeUnknownOutcome || res.Error.Code == bus.CodeTimeout)) {
						failures <- fmt.Errorf("call %s: %s", key, jsonOf(res))
						return
					}
				}
				cmu.Lock()
				completed[session+"/"+reply] = true
				cmu.Unlock()
				progress.Add(1)
			}
		})
	}
	// The faults, spaced by the agents' progress: each stream's leader
	// stops and comes back, then a router dies without a word (its
	// connection cut) and another starts, then a worker's connection is cut.
	after := func(k int) {
		testkit.CheckFor(t, 6*bound, 10*time.Millisecond, func() error {
			if int(progress.Load()) < (k+1)*agents*batches/(len(faults)+4) {
				return fmt.Errorf("%d batches done", progress.Load())
			}
			return nil
		})
	}
	for k, stream := range faults {
		after(k)
		leader, err := e.cluster.WaitStreamLeader(testkit.Within(t, 3*bound), stream)
		if err != nil {
			t.Fatal(err)
		}
		e.cluster.StopNode(leader)
		if _, err := e.cluster.WaitStreamLeader(testkit.Within(t, 3*bound), stream); err != nil {
			t.Fatal(err)
		}
		if err := e.cluster.Start(leader); err != nil {
			t.Fatal(err)
		}
		// The next node stops only once this one has caught up, as an
		// operator's rolling restart waits for /healthz: stopped while
		// it is still catching up, the streams would have one current
		// replica of three, no quorum, and every call would wait for
		// both nodes (docs/operations.md, "Restarting nodes").
		if err := e.cluster.WaitHealthy(testkit.Within(t, 6*bound)); err != nil {
			t.Fatal(err)
		}
	}
	after(len(faults))
	e.rconns[0].Close()
	e.addRouter()
	after(len(faults) + 1)
	workerConn.Close()
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	check.mu.Lock()
	unknown := 0
	for _, sum := range check.results {
		if strings.HasPrefix(sum, "error:UnknownOutcomeError") || strings.HasPrefix(sum, "error:Tool execution timeout") {
			unknown++
		}
	}
	t.Logf("%d calls, %d side effects, %d unknown outcomes or time-outs (an exec request or reply lost with a node, or a router killed mid-call)", len(check.results), len(check.runs), unknown)
	for key, n := range check.runs {
		if n > 1 {
			t.Errorf("%s ran %d times", key, n)
		}
	}
	for _, c := range check.changed {
		t.Errorf("answered two ways: %s", c)
	}
	check.mu.Unlock()
	// Every completed batch's batch.done is stored, or the batch is sent
	// again (1.15); every stored result agrees with what the agent was told.
	scan := func() (done map[string]bool, seen map[string][]string, err error) {
		done, seen = map[string]bool{}, map[string][]string{} // seen: batch → the types and sources stored for it
		evs, err := stored(t, e.nc, "*")
		if err != nil {
			return nil, nil, err
		}
		for _, ev := range evs {
			seen[ev.SessionID+"/"+ev.ReplyID] = append(seen[ev.SessionID+"/"+ev.ReplyID], ev.Type+"@"+ev.Source)
			switch ev.Type {
			case bus.TypeBatchDone:
				done[ev.SessionID+"/"+ev.ReplyID] = true
			case bus.TypeCallResult:
				var r bus.Result
				if ev.DataAs(&r) == nil {
					check.saw(ev.SessionID+"/"+ev.ReplyID+"/"+r.ID, r)
				}
			}
		}
		return done, seen, nil
	}
	var missing []string
	testkit.CheckFor(t, 3*bound, 100*time.Millisecond, func() error {
		done, _, err := scan()
		if err != nil {
			return err
		}
		missing = missing[:0]
		cmu.Lock()
		defer cmu.Unlock()
		for key := range completed {
			if !done[key] {
				missing = append(missing, key)
			}
		}
		return nil
	})
	t.Logf("%d of %d completed batches have no batch.done stored when the agents are done; each is sent again", len(missing), len(completed))
	c := client.New(e.connect(t), client.Config{Source: "test/agent-again"})
	for _, key := range missing {
		session, reply, _ := strings.Cut(key, "/")
		r, err := callResending(t, c, check, session, reply, []bus.Call{{ID: "c1", Name: "charge"}, {ID: "c2", Name: "charge"}})
		if err != nil {
			t.Fatalf("batch %s sent again: %v", key, err)
		}
		for _, res := range r.Results {
			check.saw(key+"/"+res.ID, res) // the same answer as the first copy's, or "answered two ways"
		}
	}
	testkit.CheckFor(t, 3*bound, 100*time.Millisecond, func() error {
		done, seen, err := scan()
		if err != nil {
			return err
		}
		cmu.Lock()
		defer cmu.Unlock()
		for key := range completed {
			if !done[key] {
				return fmt.Errorf("batch %s has no batch.done in the stream, only %v", key, seen[key])
			}
		}
		return nil
	})
	check.mu.Lock()
	defer check.mu.Unlock()
	for key, n := range check.runs {
		if n > 1 {
			t.Errorf("%s ran %d times (a batch sent again ran it)", key, n)
		}
	}
	for _, c := range check.changed {
		t.Errorf("answered two ways: %s", c)
	}
}

// callResending sends a batch and re-sends it with the same reply id when no
// reply comes in time or a call was unavailable, as an agent does, for at
// most two minutes. check, when not nil, sees the results it re-sends for.
func callResending(t *testing.T, c *client.Client, check *ledgerCheck, session, reply string, calls []bus.Call) (*bus.Reply, error) {
	t.Helper()
	until := time.Now().Add(2 * time.Minute)
	for {
		if check != nil {
			check.sent(session + "/" + reply)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		r, err := c.Call(ctx, session, bus.Batch{Calls: calls}, client.WithReplyID(reply))
		cancel()
		if err == nil && !anyUnavailable(r) {
			return r, nil
		}
		if err == nil {
			for _, res := range r.Results {
				if check != nil {
					check.saw(session+"/"+reply+"/"+res.ID, res)
				}
			}
			continue
		}
		var be *bus.Error
		if errors.As(err, &be) && be.Code != bus.CodeInternal || time.Now().After(until) || t.Context().Err() != nil {
			return nil, err
		}
	}
}

// anyUnavailable reports whether a call of r did not run for want of a
// worker or of the ledger: the agent sends the batch again.
func anyUnavailable(r *bus.Reply) bool {
	for _, res := range r.Results {
		if res.Error != nil && res.Error.Code == bus.CodeUnavailable {
			return true
		}
	}
	return false
}
