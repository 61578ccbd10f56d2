package embedded

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// The router that runs side-effecting calls dies (its connection cut, no
// drain) while they run on their worker. Every re-sent batch is answered
// within 5 s of the dead router's lease running out (the lease is three
// test heartbeats; the tool's timeout is a minute, which is how long the
// re-sends waited before leases), each call with one result
// (unknown_outcome: it ran, and nobody recorded how it went), the same on
// every later re-send, and no call runs twice.
func TestClusterRouterKilledMidCall(t *testing.T) {
	lease := 3 * testHeartbeat
	e := startEnv(t, 1, true, router.Config{Lease: lease})
	check := newLedgerCheck()
	var sig signals
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "charge", Description: "Charges once.", ConcurrencySafe: true,
			Permission: bus.PermissionAllow, InputSchema: objectSchema(`{}`), TimeoutMS: 60000},
			func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
				key := c.SessionID + "/" + c.ReplyID + "/" + c.ID
				check.ran(key)
				sig.fire(key + "/started")
				if !sig.wait(ctx, "release") {
					return nil, fmt.Errorf("never released")
				}
				return textResult("charged " + c.ID), nil
			})
	})
	e.waitLive("charge")
	const batches = 4
	calls := []bus.Call{{ID: "c1", Name: "charge"}, {ID: "c2", Name: "charge"}}
	first, cancelFirst := context.WithCancel(t.Context())
	defer cancelFirst()
	for i := range batches {
		go func() {
			_, _ = e.client.Call(first, "s1", bus.Batch{Calls: calls}, client.WithReplyID(fmt.Sprintf("r%d", i)))
		}()
	}
	for i := range batches {
		for _, c := range calls {
			waitClosed(t, sig.ch(fmt.Sprintf("s1/r%d/%s/started", i, c.ID)), "a call to start")
		}
	}
	// The router dies: its connection is cut, nothing is drained.
	e.rconns[0].Close()
	killed := time.Now()
	e.addRouter()
	type answer struct {
		reply *bus.Reply
		at    time.Time
		err   error
	}
	answers := make([]answer, batches)
	var wg sync.WaitGroup
	for i := range batches {
		wg.Go(func() {
			r, err := resend(t, e.client, "s1", fmt.Sprintf("r%d", i), calls)
			answers[i] = answer{r, time.Now(), err}
		})
	}
	wg.Wait()
	sig.fire("release")
	var slowest time.Duration
	for i, a := range answers {
		if a.err != nil {
			t.Fatalf("re-send r%d: %v", i, a.err)
		}
		took := a.at.Sub(killed)
		slowest = max(slowest, took)
		if took > lease+5*time.Second {
			t.Errorf("re-send r%d answered %v after the kill; the lease is %v", i, took, lease)
		}
		checkCallOrder(t, calls, a.reply.Results)
		for _, res := range a.reply.Results {
			check.saw(fmt.Sprintf("s1/r%d/%s", i, res.ID), res)
			wantFailure(t, res, bus.StateError, bus.CodeUnknownOutcome, "UnknownOutcomeError: The earlier run of tool 'charge' for this call did not report back; it may or may not have taken effect.")
		}
	}
	t.Logf("every re-send answered within %v of the kill (lease %v, tool timeout 60s)", slowest, lease)
	// Later re-sends get the same answers and run nothing.
	for i := range batches {
		again := e.call(t, "s1", calls, client.WithReplyID(fmt.Sprintf("r%d", i)))
		if diff := cmp.Diff(answers[i].reply.Results, again.Results); diff != "" {
			t.Errorf("r%d answered two ways (-first +again):\n%s", i, diff)
		}
	}
	check.mu.Lock()
	defer check.mu.Unlock()
	for key, n := range check.runs {
		if n != 1 {
			t.Errorf("%s ran %d times", key, n)
		}
	}
	if len(check.runs) != batches*len(calls) {
		t.Errorf("%d calls ran, want %d", len(check.runs), batches*len(calls))
	}
	for _, c := range check.changed {
		t.Errorf("answered two ways: %s", c)
	}
}

// setAccountStore sets the JetStream store and memory limit of the
// deployment's account on every node: max bytes, or no limit when max is
// negative. A limit below what the streams hold makes JetStream refuse
// every write ("resource limits exceeded for account"): the store is full.
func (e *env) setAccountStore(t *testing.T, max int64) {
	t.Helper()
	limits := map[string]server.JetStreamAccountLimits{"": {MaxMemory: max, MaxStore: max, MaxStreams: -1, MaxConsumers: -1, MaxAckPending: -1}}
	if max < 0 {
		limits = nil // the defaults: no limit
	}
	for i := range e.cluster.Nodes() {
		if err := e.cluster.Node(i).GlobalAccount().UpdateJetStreamLimits(limits); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
}

// The store fills up (the account's JetStream limit below what it holds):
// side-effecting calls fail fast with an internal result that says "store
// full" and run nothing, read-only calls still run, a tool whose workers'
// heartbeats can no longer be stored is reported store full too, not "No
// live worker", every router says so in status, and once space is freed
// the next calls succeed with no restart.
func TestClusterStoreFull(t *testing.T) {
	e := startEnv(t, 2, true, router.Config{})
	var charges, reads sync.Map
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "charge", Description: "Charges once.", ConcurrencySafe: true,
			Permission: bus.PermissionAllow, InputSchema: objectSchema(`{}`)},
			func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
				charges.Store(c.ReplyID, true)
				return textResult("charged"), nil
			})
		handle(t, w, bus.ToolDef{Name: "look", Description: "Reads.", ConcurrencySafe: true, ReadOnly: true,
			Permission: bus.PermissionAllow, InputSchema: objectSchema(`{}`)},
			func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
				reads.Store(c.ReplyID, true)
				return textResult("looked"), nil
			})
	})
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true, Permission: bus.PermissionAllow})
	e.waitLive("charge", "look", "ext")
	wantSuccess(t, e.call(t, "s1", []bus.Call{{ID: "c1", Name: "charge"}}).Results[0], "charged")
	if r, err := e.client.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "x1", Name: "ext"}}}, client.WithReplyID("parked")); err != nil || len(r.Parked) != 1 {
		t.Fatalf("the external call did not park: %v %s", err, jsonOf(r))
	}

	e.setAccountStore(t, 1)
	// An answer is refused at once, and changes nothing.
	start := time.Now()
	actx, acancel := context.WithTimeout(t.Context(), 3*bound)
	err := e.client.Parked().Answer(actx, "ext", "s1", "parked", "x1", bus.Answer{State: "success", Output: bus.Text("answered")})
	acancel()
	if err == nil || !strings.Contains(err.Error(), "store full") || time.Since(start) > 5*time.Second {
		t.Fatalf("an answer with the store full: %v after %v", err, time.Since(start))
	}
	defer e.setAccountStore(t, -1)
	// Every call of a batch fails fast while the store is full: over a few
	// heartbeats (the workers' beats are refused from now on), each batch
	// is answered in bounded time, each side-effecting call store full and
	// never run.
	var slowest time.Duration
	until := time.Now().Add(6 * testHeartbeat)
	for n := 0; time.Now().Before(until) || n < 3; n++ {
		reply := fmt.Sprintf("full-%d", n)
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 3*bound)
		r, err := e.client.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "charge"}, {ID: "l1", Name: "look"}}}, client.WithReplyID(reply))
		cancel()
		took := time.Since(start)
		slowest = max(slowest, took)
		if err != nil {
			t.Fatalf("%s: %v after %v", reply, err, took)
		}
		if took > 5*time.Second {
			t.Errorf("%s answered after %v with the store full", reply, took)
		}
		res := r.Results[0]
		if res.Error == nil || res.Error.Code != bus.CodeInternal || !strings.HasPrefix(textOf(res), "InternalError: store full: ") {
			t.Fatalf("%s: charge with the store full: %s", reply, jsonOf(res))
		}
		if _, ran := charges.Load(reply); ran {
			t.Fatalf("%s: charge ran with the store full", reply)
		}
		if look := r.Results[1]; look.State != bus.StateSuccess && !strings.HasPrefix(textOf(look), "InternalError: store full: ") {
			t.Fatalf("%s: a read-only call with the store full: %s", reply, jsonOf(look))
		}
	}
	t.Logf("with the store full, the slowest batch was answered in %v", slowest)
	testkit.CheckFor(t, 3*bound, 50*time.Millisecond, func() error {
		for id, st := range e.statuses(t) {
			if st.Store.State != "full" || st.Store.Error == "" {
				return fmt.Errorf("router %s reports the store %+v", id, st.Store)
			}
		}
		return nil
	})

	e.setAccountStore(t, -1)
	// Space is back: the next calls succeed, on whichever router.
	attempts := 0
	testkit.CheckFor(t, 3*bound, 50*time.Millisecond, func() error {
		attempts++
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		defer cancel()
		reply := fmt.Sprintf("back-%d", attempts)
		r, err := e.client.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "charge"}}}, client.WithReplyID(reply))
		if err != nil {
			return err
		}
		if r.Results[0].State != bus.StateSuccess {
			return fmt.Errorf("after space came back: %s", jsonOf(r.Results[0]))
		}
		return nil
	})
	t.Logf("the store had space again: %d batch(es) until a call succeeded", attempts)
	actx, acancel = context.WithTimeout(t.Context(), 3*bound)
	if err := e.client.Parked().Answer(actx, "ext", "s1", "parked", "x1", bus.Answer{State: "success", Output: bus.Text("answered")}); err != nil {
		t.Fatalf("the answer once space came back: %v", err)
	}
	acancel()
	// Every router sees the space again on its own next write or beat;
	// once each says so, calls succeed on whichever router takes them.
	testkit.CheckFor(t, 3*bound, 50*time.Millisecond, func() error {
		for id, st := range e.statuses(t) {
			if st.Store.State != "ok" {
				return fmt.Errorf("router %s still reports the store %+v", id, st.Store)
			}
		}
		return nil
	})
	// And every router sees the worker live again: its beats land in KV
	// once there is space, within a heartbeat (until then a call there
	// is an honest, retryable unavailable).
	e.waitLive("charge")
	for range 4 {
		wantSuccess(t, e.call(t, "s1", []bus.Call{{ID: "c1", Name: "charge"}}).Results[0], "charged")
	}
}

// TestClusterRouterSIGKILL is TestClusterRouterKilledMidCall with the
// router a real process killed with SIGKILL (cmd/router, replicas 3): the
// batches re-sent to the router started in its place are answered within
// 5 s of the dead router's lease running out (or of the new router
// serving, when that comes later), each call once, none run twice.
func TestClusterRouterSIGKILL(t *testing.T) {
	bin := buildRouter(t)
	cl := testkit.RunCluster(t)
	nc := testkit.ConnectURL(t, cl.URLs(2))
	c := client.New(nc, client.Config{Source: "test/agent"})
	lease := 3 * testHeartbeat
	args := func(id string) []string {
		return []string{"--replicas", "3", "--builtin=false", "--id", id, "--heartbeat", testHeartbeat.String(), "--lease", lease.String()}
	}
	a := startRouterArgs(t, bin, append([]string{"--nats", cl.URLs(0)}, args("A")...)...)
	check := newLedgerCheck()
	var sig signals
	w, err := worker.New(testkit.ConnectURL(t, cl.URLs(2)), worker.Config{Heartbeat: testHeartbeat})
	if err != nil {
		t.Fatal(err)
	}
	handle(t, w, bus.ToolDef{Name: "charge", Description: "Charges once.", ConcurrencySafe: true,
		Permission: bus.PermissionAllow, InputSchema: objectSchema(`{}`), TimeoutMS: 60000},
		func(ctx context.Context, call *worker.Call) (*bus.ExecResult, error) {
			key := call.SessionID + "/" + call.ReplyID + "/" + call.ID
			check.ran(key)
			sig.fire(key + "/started")
			if !sig.wait(ctx, "release") {
				return nil, fmt.Errorf("never released")
			}
			return textResult("charged " + call.ID), nil
		})
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sig.fire("release"); _ = w.Drain(context.Background()) })
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		list, err := c.Tools(t.Context(), "s1", "", nil)
		if err != nil {
			return err
		}
		for _, tool := range list.Tools {
			if strings.Contains(string(tool), `"charge"`) {
				return nil
			}
		}
		return fmt.Errorf("charge not listed yet")
	})
	const batches = 4
	calls := []bus.Call{{ID: "c1", Name: "charge"}, {ID: "c2", Name: "charge"}}
	for i := range batches {
		if _, err := c.Publish("s1", bus.Batch{Calls: calls}, client.WithReplyID(fmt.Sprintf("r%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range batches {
		for _, call := range calls {
			waitClosed(t, sig.ch(fmt.Sprintf("s1/r%d/%s/started", i, call.ID)), "a call to start")
		}
	}
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL: no drain, no goodbye
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	killed := time.Now()
	startRouterArgs(t, bin, append([]string{"--nats", cl.URLs(1)}, args("B")...)...)
	serving := time.Now()
	from := killed.Add(lease)
	if serving.After(from) {
		from = serving
	}
	answers := make([]*bus.Reply, batches)
	at := make([]time.Time, batches)
	var wg sync.WaitGroup
	for i := range batches {
		wg.Go(func() {
			r, err := resend(t, c, "s1", fmt.Sprintf("r%d", i), calls)
			if err != nil {
				t.Errorf("re-send r%d: %v", i, err)
				return
			}
			answers[i], at[i] = r, time.Now()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	sig.fire("release")
	var slowest time.Duration
	for i, r := range answers {
		slowest = max(slowest, at[i].Sub(killed))
		if late := at[i].Sub(from); late > 5*time.Second {
			t.Errorf("re-send r%d answered %v after the lease ran out (or the new router served)", i, late)
		}
		checkCallOrder(t, calls, r.Results)
		for _, res := range r.Results {
			check.saw(fmt.Sprintf("s1/r%d/%s", i, res.ID), res)
			wantFailure(t, res, bus.StateError, bus.CodeUnknownOutcome, "UnknownOutcomeError: The earlier run of tool 'charge' for this call did not report back; it may or may not have taken effect.")
		}
	}
	t.Logf("SIGKILL: the new router served %v after the kill; every re-send answered within %v of the kill (lease %v)", serving.Sub(killed), slowest, lease)
	check.mu.Lock()
	defer check.mu.Unlock()
	for key, n := range check.runs {
		if n != 1 {
			t.Errorf("%s ran %d times", key, n)
		}
	}
	for _, ch := range check.changed {
		t.Errorf("answered two ways: %s", ch)
	}
}

// resend sends a batch again as an agent does after its router died, while
// the router started in its place becomes reachable: on a cluster, a new
// router's interest reaches the agent's node a moment after it serves, and
// until then the request has no responders.
func resend(t *testing.T, c *client.Client, session, reply string, calls []bus.Call) (*bus.Reply, error) {
	t.Helper()
	until := time.Now().Add(bound)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 3*bound)
		r, err := c.Call(ctx, session, bus.Batch{Calls: calls}, client.WithReplyID(reply))
		cancel()
		if err == nil || !errors.Is(err, nats.ErrNoResponders) || time.Now().After(until) {
			return r, err
		}
	}
}
