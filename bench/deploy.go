package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// Goroutine label that attributes CPU samples to the parts of a deployment:
// every connection and goroutine of a part is started under it, and the
// goroutines they spawn inherit it. nats-server and the Go runtime's own
// goroutines (GC workers) carry none.
const (
	labelKey   = "toolbus_bench"
	partRouter = "router" // the toolbus router, or the raw forwarder
	partWorker = "worker" // the toolbus worker, or the raw responder
	partClient = "client" // the agent's client and the measuring loops
	partOther  = "other"  // nats-server (in process), GC, everything unlabeled
)

// Names used by the deployment.
const (
	benchGroup = "bench"
	toolRead   = "echo"      // trivial read-only tool
	toolWrite  = "put"       // trivial non-read-only tool (dedupe ledger)
	toolParked = "ask_human" // external tool
	toolSleep  = "sleep5"    // I/O-bound tool, 5 ms
	sleepFor   = 5 * time.Millisecond
	rawEcho    = "bench.raw.echo"
	rawRelay   = "bench.raw.relay"
	rawBack    = "bench.raw.back."
	barePrefix = "benchbare"
	bareBack   = "benchbare.back."
	readyBound = 20 * time.Second
)

// Pending limits of the bench's own subscriptions (the raw responder and
// forwarder, the bare forwarder): the router's defaults, so that the
// stand-ins buffer no more than the router would before NATS drops
// messages as a slow consumer (router.Config.MaxInflight and pendingBytes).
const (
	pendingMsgs  = 4096
	pendingBytes = 64 << 20
)

// benchInput is the input of every trivial call; it passes the tools'
// schema {"text": string, required}.
var benchInput = json.RawMessage(`{"text":"hello"}`)

type textIn struct {
	Text string `json:"text" jsonschema:"description=Text to echo back."`
}

// deployment is one embedded nats-server with everything measured on it
// (started by internal/testkit/xtest): the raw responder and forwarder, a router,
// workers, an agent client, and the bare forwarder that stands in for the
// router when its share is subtracted.
type deployment struct {
	x    *xtest.Deployment
	logf func(string, ...any)

	rawNC   *nats.Conn // the raw requester
	payload []byte     // raw request and reply payload: an encoded batch event

	sleepers []*worker.Worker // serve sleep5, one call at a time each

	clientNC *nats.Conn
	client   *client.Client
	bare     *client.Client // client on barePrefix, served by the bare forwarder

	sessions []string // sessions with the bench group active, one per caller
}

// labelled runs fn with the goroutine label of part; connections and
// goroutines created inside keep it.
func labelled(ctx context.Context, part string, fn func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(labelKey, part), fn)
}

// connect opens a connection labelled part (an xtest role).
func (d *deployment) connect(ctx context.Context, part string) (*nats.Conn, error) {
	return d.x.Connect(ctx, part)
}

// deploy starts the server (a 3-node cluster with replicas 3 when
// cluster) and everything on it; sessions is how many caller sessions to
// prepare (the largest caller count).
func deploy(ctx context.Context, sessions int, cluster bool, logf func(string, ...any)) (d *deployment, err error) {
	d = &deployment{logf: logf}
	defer func() {
		if err != nil {
			d.close()
			d = nil
		}
	}()
	// One router with the bench meta group, the default heartbeat (as
	// deployed), connections that do not reconnect, every part labelled.
	d.x, err = xtest.Start(ctx, xtest.Config{Cluster: cluster, Routers: 1, Heartbeat: bus.DefaultHeartbeat, Bound: readyBound,
		Router:  router.Config{Groups: []bus.Group{{Name: benchGroup, Description: "Benchmark tools.", Scope: bus.ScopeMeta}}},
		Options: []nats.Option{nats.MaxReconnects(0)},
		Around:  labelled})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err = d.startRaw(ctx); err != nil {
		return nil, err
	}
	if err = d.startToolbus(ctx); err != nil {
		return nil, err
	}
	if err = d.startBare(ctx); err != nil {
		return nil, err
	}
	if d.sessions, err = prepareSessions(ctx, d.client, sessions); err != nil {
		return nil, err
	}
	return d, nil
}

// startRaw starts the core NATS baseline: a responder that echoes, and a
// forwarder in a queue group that relays requests to the responder and the
// replies back, without a goroutine or a map per request (the original
// reply subject rides in the forwarder's reply subject).
func (d *deployment) startRaw(ctx context.Context) error {
	ev, err := bus.NewEvent(bus.TypeCallBatch, "bench/agent", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: toolRead, Input: benchInput}}})
	if err != nil {
		return err
	}
	ev.SessionID = "bench-0"
	if d.payload, err = ev.Encode(); err != nil {
		return err
	}
	resp, err := d.connect(ctx, partWorker)
	if err != nil {
		return err
	}
	fwd, err := d.connect(ctx, partRouter)
	if err != nil {
		return err
	}
	if d.rawNC, err = d.connect(ctx, partClient); err != nil {
		return err
	}
	var subErr error
	sub := func(nc *nats.Conn, subject, queue string, h nats.MsgHandler) {
		if subErr != nil {
			return
		}
		var s *nats.Subscription
		labelled(ctx, partOf(nc, resp), func(context.Context) { s, subErr = nc.QueueSubscribe(subject, queue, h) })
		if subErr == nil {
			subErr = s.SetPendingLimits(pendingMsgs, pendingBytes)
		}
	}
	sub(resp, rawEcho, "", func(m *nats.Msg) { _ = resp.Publish(m.Reply, m.Data) })
	sub(fwd, rawRelay, "bench-relay", func(m *nats.Msg) {
		_ = fwd.PublishMsg(&nats.Msg{Subject: rawEcho, Reply: rawBack + m.Reply, Data: m.Data})
	})
	sub(fwd, rawBack+">", "", func(m *nats.Msg) { _ = fwd.Publish(m.Subject[len(rawBack):], m.Data) })
	if subErr != nil {
		return fmt.Errorf("bench: raw subscriptions: %w", subErr)
	}
	for _, nc := range []*nats.Conn{resp, fwd} {
		if err := bus.Flush(ctx, nc); err != nil {
			return err
		}
	}
	return nil
}

func partOf(nc, resp *nats.Conn) string {
	if nc == resp {
		return partWorker
	}
	return partRouter
}

// startToolbus starts one worker with the trivial tools, and waits until
// the router lists them live.
func (d *deployment) startToolbus(ctx context.Context) error {
	_, err := d.startWorker(ctx, worker.Config{}, registerTrivial)
	if err != nil {
		return err
	}
	d.clientNC, err = d.connect(ctx, partClient)
	if err != nil {
		return err
	}
	d.client = client.New(d.clientNC, client.Config{Source: "bench/agent"})
	d.bare = client.New(d.clientNC, client.Config{Source: "bench/agent", Prefix: barePrefix})
	return d.x.WaitLive(ctx, toolRead, toolWrite, toolParked)
}

// registerTrivial registers the trivial tools on w: echo (read-only), put
// (not read-only: the dedupe ledger records it) and ask_human (external).
func registerTrivial(w *worker.Worker) error {
	echo := func(_ context.Context, _ *worker.Call, in textIn) (string, error) { return in.Text, nil }
	schemaDef := func(name, desc string) bus.ToolDef {
		return bus.ToolDef{Name: name, Description: desc, Groups: []string{benchGroup}}
	}
	ro := schemaDef(toolRead, "Echo the text (read-only).")
	ro.ReadOnly = true
	if err := worker.Register(w, ro, echo); err != nil {
		return err
	}
	wr := schemaDef(toolWrite, "Store the text (not read-only).")
	wr.Permission = bus.PermissionAllow
	if err := worker.Register(w, wr, echo); err != nil {
		return err
	}
	ext := schemaDef(toolParked, "Ask a person (external).")
	ext.External, ext.Permission, ext.Groups = true, bus.PermissionAllow, nil
	return worker.Register(w, ext, echo)
}

// startWorker starts one worker on its own connection, labelled worker,
// and waits for its registration's ack; the deployment drains it on close.
func (d *deployment) startWorker(ctx context.Context, cfg worker.Config, setup func(*worker.Worker) error) (*worker.Worker, error) {
	w, err := d.x.AddWorker(ctx, xtest.WorkerSpec{Config: cfg, Setup: setup})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return w, nil
}

// addSleepers grows the sleep5 workers to n, each limited to one call at a
// time.
func (d *deployment) addSleepers(ctx context.Context, n int) error {
	for len(d.sleepers) < n {
		w, err := d.startWorker(ctx, worker.Config{MaxConcurrent: 1}, func(w *worker.Worker) error {
			def := bus.ToolDef{Name: toolSleep, Description: "Wait 5 ms (I/O-bound).", ReadOnly: true}
			return worker.Register(w, def, func(ctx context.Context, _ *worker.Call, in textIn) (string, error) {
				t := time.NewTimer(sleepFor)
				defer t.Stop()
				select {
				case <-t.C:
					return in.Text, nil
				case <-ctx.Done():
					return "", ctx.Err()
				}
			})
		})
		if err != nil {
			return err
		}
		d.sleepers = append(d.sleepers, w)
	}
	return d.x.WaitLive(ctx, toolSleep)
}

// startBare starts the bare forwarder: it serves the bare client's batches
// by sending a prepared exec request to the real worker and, when the worker
// answers, publishing the one event a router publishes (batch.done, into
// the events stream: docs/protocol.md 3.4) and a prepared reply; the exec
// goes in binary mode, as a router sends it to the worker SDK (5.1). It does what the
// router's messages cost the client, the worker and the server, and no
// router work, so toolbus minus bare estimates the router's own share.
func (d *deployment) startBare(ctx context.Context) error {
	exec, err := bus.NewEvent(bus.TypeExec, "bench/bare", bus.ExecRequest{
		Call: bus.Call{ID: "c1", Name: toolRead, Input: benchInput}, Attempt: 1})
	if err != nil {
		return err
	}
	exec.SessionID, exec.ReplyID, exec.ToolCallID = "bench-0", "bare", "c1"
	exec.ExpiryTime = time.Now().Add(365 * 24 * time.Hour).UTC().Format(time.RFC3339Nano)
	execMsg := bus.BinaryMsg(bus.NewSubjects("").Exec(toolRead), exec)
	res := bus.Result{ID: "c1", Name: toolRead, State: bus.StateSuccess, Output: bus.Text("hello")}
	mk := func(typ string, data any) (*nats.Msg, error) {
		e, err := bus.NewEvent(typ, "bench/bare", data)
		if err != nil {
			return nil, err
		}
		e.SessionID, e.ReplyID = "bench-0", "bare"
		if typ == bus.TypeCallResult {
			e.Subject, e.ToolCallID = "c1", "c1"
		}
		return e.Msg(bus.NewSubjects("").Events("bench-0"))
	}
	doneMsg, err := mk(bus.TypeBatchDone, bus.BatchDone{Results: []bus.Result{res}})
	if err != nil {
		return err
	}
	replyMsg, err := mk(bus.TypeCallReply, bus.Reply{Results: []bus.Result{res}, Parked: []bus.Parked{}})
	if err != nil {
		return err
	}
	nc, err := d.connect(ctx, partRouter)
	if err != nil {
		return err
	}
	send := func(m *nats.Msg, subject string) {
		_ = nc.PublishMsg(&nats.Msg{Subject: subject, Header: m.Header, Data: m.Data})
	}
	var s1, s2 *nats.Subscription
	labelled(ctx, partRouter, func(context.Context) {
		s1, err = nc.QueueSubscribe(barePrefix+".call.>", "bench-bare", func(m *nats.Msg) {
			_ = nc.PublishMsg(&nats.Msg{Subject: execMsg.Subject, Reply: bareBack + m.Reply, Header: execMsg.Header, Data: execMsg.Data})
		})
		if err != nil {
			return
		}
		s2, err = nc.Subscribe(bareBack+">", func(m *nats.Msg) {
			send(doneMsg, doneMsg.Subject)
			send(replyMsg, m.Subject[len(bareBack):])
		})
	})
	if err != nil {
		return fmt.Errorf("bench: bare forwarder: %w", err)
	}
	for _, s := range []*nats.Subscription{s1, s2} {
		if err := s.SetPendingLimits(pendingMsgs, pendingBytes); err != nil {
			return fmt.Errorf("bench: bare forwarder: %w", err)
		}
	}
	return bus.Flush(ctx, nc)
}

// prepareSessions activates the bench group, through reset_tools calls, in
// n sessions, one per caller, and returns them.
func prepareSessions(ctx context.Context, c *client.Client, n int) ([]string, error) {
	sessions := make([]string, n)
	for i := range sessions {
		sessions[i] = "bench-" + strconv.Itoa(i)
	}
	return sessions, parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		return activate(ctx, c, sessions[i])
	})
}

// activate turns the bench group on in session (reset_tools).
func activate(ctx context.Context, c *client.Client, session string) error {
	reply, err := c.Call(ctx, session, bus.Batch{Calls: []bus.Call{{ID: "r1", Name: groups.ResetTools,
		Input: json.RawMessage(`{"` + benchGroup + `":true}`)}}})
	if err != nil {
		return fmt.Errorf("bench: reset_tools: %w", err)
	}
	return checkReply(reply, 1)
}

// callOnce calls tool once in session with the bench input and checks the
// reply holds one success.
func callOnce(ctx context.Context, c *client.Client, session, tool string) error {
	reply, err := c.Call(ctx, session, bus.Batch{Calls: []bus.Call{{ID: "c1", Name: tool, Input: benchInput}}})
	if err != nil {
		return err
	}
	return checkReply(reply, 1)
}

// checkReply returns an error unless the reply holds n successful results.
func checkReply(r *bus.Reply, n int) error {
	if len(r.Results) != n {
		return fmt.Errorf("bench: %d results for %d calls (parked %d)", len(r.Results), n, len(r.Parked))
	}
	for _, res := range r.Results {
		if res.State != bus.StateSuccess {
			msg := ""
			if len(res.Output) > 0 {
				msg = res.Output[0].Text
			}
			return fmt.Errorf("bench: call %s of %s: %s: %s", res.ID, res.Name, res.State, msg)
		}
	}
	return nil
}

// parallel runs fn(i) for i < n on at most width goroutines and returns the
// first error.
func parallel(ctx context.Context, n, width int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next int
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range min(width, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil || i >= n
				mu.Unlock()
				if stop || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// The calls measured. Each takes the caller's index, which picks its session.

func (d *deployment) oneHop(ctx context.Context, _ int) error {
	_, err := d.rawNC.RequestWithContext(ctx, rawEcho, d.payload)
	return err
}

func (d *deployment) relay(ctx context.Context, _ int) error {
	_, err := d.rawNC.RequestWithContext(ctx, rawRelay, d.payload)
	return err
}

func (d *deployment) callTool(c *client.Client, tool string) callFunc {
	return func(ctx context.Context, i int) error {
		return callOnce(ctx, c, d.sessions[i%len(d.sessions)], tool)
	}
}

// close stops everything deploy started, in reverse order.
func (d *deployment) close() {
	if d.x != nil {
		d.x.Close()
	}
}
