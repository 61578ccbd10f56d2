package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// env is one deployment on a real in-process nats-server (internal/testkit/xtest),
// with the test agent's client.
type env struct {
	t       *testing.T
	d       *xtest.Deployment
	srv     *server.Server    // the one node; nil on a cluster
	cluster *embedded.Cluster // the cluster, replicas 3; nil on one node
	routers []*router.Router
	rconns  []*nats.Conn // each router's connection, to kill it
	client  *client.Client
	nc      *nats.Conn
}

const testHeartbeat = 500 * time.Millisecond

// calmHeartbeat is the heartbeat of tests that judge no worker gone: at
// load 16-20 under -race a worker's beats came more than three test beats
// (1.5 s) apart, and its calls ended unknown_outcome (TestLoadSharing) or
// its tools left the list (TestOnCluster/ResetToolsScenarios).
const calmHeartbeat = 2 * time.Second

// bound is the generous limit for anything that should happen "soon" on a
// busy two-core machine under -race.
const bound = 10 * time.Second

// readyBound limits the deployment's waits (xtest: a worker's registration,
// WaitLive, WaitGone, EveryRouter): bounded polls that end once ready, so
// a longer limit costs nothing but a later failure. At load 16-20 a
// registration took longer than bound (TestListingBytes).
const readyBound = 30 * time.Second

// newEnv starts a deployment with routers: on one nats-server, or, for
// the tests that TestOnCluster runs, on a 3-node cluster with every bucket
// and stream replicated three times.
func newEnv(t *testing.T, routers int) *env {
	t.Helper()
	return startEnv(t, routers, onCluster(t), router.Config{})
}

// startEnv starts a deployment with routers configured by rc (the test
// heartbeat and logger filled in), on a cluster when cluster is true. On a
// cluster it returns once every node sees the routers' subscriptions.
func startEnv(t *testing.T, routers int, cluster bool, rc router.Config) *env {
	t.Helper()
	return startEnvBeat(t, routers, cluster, rc, testHeartbeat)
}

// startEnvBeat is startEnv with the routers' and workers' heartbeat hb.
func startEnvBeat(t *testing.T, routers int, cluster bool, rc router.Config, hb time.Duration) *env {
	t.Helper()
	if rc.Logger == nil {
		rc.Logger = testLogger()
	}
	d := xtest.Run(t, xtest.Config{Cluster: cluster, Routers: routers, Router: rc, Heartbeat: hb, Bound: readyBound})
	e := &env{t: t, d: d, srv: d.Server, cluster: d.Cluster,
		routers: slices.Clone(d.Routers), rconns: slices.Clone(d.RouterConns)}
	e.nc = e.connect(t)
	e.client = client.New(e.nc, client.Config{Source: "test/agent"})
	return e
}

// connect opens a connection to the deployment, closed when the deployment
// is; on a cluster each new connection starts on the next node, and knows
// them all.
func (e *env) connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := e.d.Connect(t.Context(), xtest.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// replicas is the replica count of the deployment's buckets and streams.
func (e *env) replicas() int { return e.d.Replicas() }

func (e *env) addRouter() *router.Router {
	e.t.Helper()
	r, err := e.d.AddRouter(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	e.routers = append(e.routers, r)
	e.rconns = append(e.rconns, e.d.RouterConns[len(e.d.RouterConns)-1])
	return r
}

// addWorker starts a worker after setup has added its tools, and waits
// until a router has acknowledged its registration (waitLive waits for
// every router); the deployment drains it when the test ends.
func (e *env) addWorker(setup func(w *worker.Worker)) *worker.Worker {
	e.t.Helper()
	return e.addWorkerOn(nil, setup)
}

// addWorkerOn is addWorker on a connection the test controls (to close it
// and simulate a crash); nil means a new one.
func (e *env) addWorkerOn(nc *nats.Conn, setup func(w *worker.Worker)) *worker.Worker {
	e.t.Helper()
	w, err := e.d.AddWorker(e.t.Context(), xtest.WorkerSpec{Conn: nc, Setup: func(w *worker.Worker) error {
		setup(w)
		return nil
	}})
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// waitLive waits until every router that serves reports the named tools
// live (P.admin.status).
func (e *env) waitLive(names ...string) {
	e.t.Helper()
	if err := e.d.WaitLive(e.t.Context(), names...); err != nil {
		e.t.Fatal(err)
	}
}

// waitGone waits until no router that serves reports any of the named
// tools live.
func (e *env) waitGone(t *testing.T, names ...string) {
	t.Helper()
	if err := e.d.WaitGone(t.Context(), names...); err != nil {
		t.Fatal(err)
	}
}

// statuses returns one P.admin.status of every router that serves, by
// router id.
func (e *env) statuses(t *testing.T) map[string]bus.Status {
	t.Helper()
	out := map[string]bus.Status{}
	err := e.d.EveryStatus(t.Context(), func(st bus.Status) error {
		out[st.Router] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// toolStatus returns the status of tool in st, or false when st does not
// list it.
func toolStatus(st bus.Status, tool string) (bus.ToolStatus, bool) {
	for _, ts := range st.Tools {
		if ts.Name == tool {
			return ts, true
		}
	}
	return bus.ToolStatus{}, false
}

// everyRouter sends the request that mk builds to every router that
// serves until check accepts each one's reply (xtest.EveryRouter).
func (e *env) everyRouter(t *testing.T, mk func() *bus.Event, subject string, check func(*bus.Event) error) {
	t.Helper()
	err := e.d.EveryRouter(t.Context(), func() (*nats.Msg, error) { return mk().Msg(subject) }, check)
	if err != nil {
		t.Fatal(err)
	}
}

// testCtx is t's context bounded so that a router that never answers fails
// the test instead of hanging it.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// call sends calls as one batch of session and returns the reply, failing
// the test when the batch is rejected or results are missing or out of
// call order. It must run on the test's goroutine.
func (e *env) call(t *testing.T, session string, calls []bus.Call, opts ...client.CallOption) *bus.Reply {
	t.Helper()
	return e.batch(t, session, bus.Batch{Calls: calls}, opts...)
}

// batch is call with the whole batch given (runtime context, request).
func (e *env) batch(t *testing.T, session string, b bus.Batch, opts ...client.CallOption) *bus.Reply {
	t.Helper()
	reply, err := e.client.Call(testCtx(t), session, b, opts...)
	if err != nil {
		t.Fatalf("call on session %s: %v", session, err)
	}
	checkCallOrder(t, b.Calls, reply.Results)
	return reply
}

// checkCallOrder fails unless results holds one result per call, in call order.
func checkCallOrder(t *testing.T, calls []bus.Call, results []bus.Result) {
	t.Helper()
	if len(results) != len(calls) {
		t.Fatalf("got %d results for %d calls: %s", len(results), len(calls), jsonOf(results))
	}
	for i, c := range calls {
		if results[i].ID != c.ID || results[i].Name != c.Name {
			t.Fatalf("result %d is %s/%s, want %s/%s (call order)", i, results[i].ID, results[i].Name, c.ID, c.Name)
		}
	}
}

// rawMsg returns a NATS message carrying data with the structured-mode
// content type.
func rawMsg(subject string, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(bus.HeaderContentType, bus.ContentTypeEvent)
	m.Data = data
	return m
}

// eventMsg encodes ev in structured mode for subject.
func eventMsg(t *testing.T, subject string, ev *bus.Event) *nats.Msg {
	t.Helper()
	m, err := ev.Msg(subject)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newEvent is bus.NewEvent from the test agent, failing the test on error.
func newEvent(t *testing.T, typ string, data any) *bus.Event {
	t.Helper()
	ev, err := bus.NewEvent(typ, "test/agent", data)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// request sends m as a NATS request and decodes the reply event, checking
// that the reply is a valid structured-mode CloudEvent.
func (e *env) request(t *testing.T, m *nats.Msg) *bus.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	resp, err := e.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		t.Fatalf("request on %s: %v", m.Subject, err)
	}
	if ct := resp.Header.Get(bus.HeaderContentType); ct != bus.ContentTypeEvent {
		t.Errorf("reply content-type header = %q, want %q", ct, bus.ContentTypeEvent)
	}
	ev, err := bus.Decode(&nats.Msg{Data: resp.Data})
	if err != nil {
		t.Fatalf("reply on %s is not a valid CloudEvent: %v\n%s", m.Subject, err, resp.Data)
	}
	return ev
}

// wantErrorEvent fails unless ev is an io.toolbus.error with code.
func wantErrorEvent(t *testing.T, ev *bus.Event, code string) {
	t.Helper()
	if ev.Type != bus.TypeError {
		t.Fatalf("reply type = %s, want %s; data %s", ev.Type, bus.TypeError, ev.Data)
	}
	var be bus.Error
	if err := json.Unmarshal(ev.Data, &be); err != nil {
		t.Fatalf("error data %s: %v", ev.Data, err)
	}
	if be.Code != code {
		t.Fatalf("error code = %q (%s), want %q", be.Code, be.Message, code)
	}
	if be.Message == "" {
		t.Errorf("error %s has no message", be.Code)
	}
}

// handle adds a raw tool to w; an empty schema means an object schema
// without properties, an empty description a generic one, and an empty
// permission "allow", so that tools that are not read-only run without
// asking in the default permission mode (permissions have their own tests).
func handle(t *testing.T, w *worker.Worker, def bus.ToolDef, h worker.Handler) {
	t.Helper()
	if def.Permission == "" {
		def.Permission = bus.PermissionAllow
	}
	if len(def.InputSchema) == 0 {
		def.InputSchema = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	if def.Description == "" {
		def.Description = "Test tool " + def.Name + "."
	}
	if err := w.Handle(def, h); err != nil {
		t.Fatal(err)
	}
}

// textResult is a successful exec result holding one text block.
func textResult(s string) *bus.ExecResult { return &bus.ExecResult{Output: bus.Text(s)} }

// textOf joins the text blocks of a result's output.
func textOf(r bus.Result) string {
	var parts []string
	for _, b := range r.Output {
		if b.Type == bus.BlockText {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// resultOf returns the result with id.
func resultOf(t *testing.T, results []bus.Result, id string) bus.Result {
	t.Helper()
	for _, r := range results {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no result for call %s in %s", id, jsonOf(results))
	return bus.Result{}
}

// wantSuccess fails unless r succeeded with exactly text.
func wantSuccess(t *testing.T, r bus.Result, text string) {
	t.Helper()
	if r.State != bus.StateSuccess || r.Error != nil {
		t.Fatalf("call %s: state %s, want success: %s", r.ID, r.State, jsonOf(r))
	}
	if got := textOf(r); got != text {
		t.Fatalf("call %s: text %q, want %q", r.ID, got, text)
	}
}

// wantFailure fails unless r has state, code and (when text is not empty)
// exactly text both as its readable output and as its error message.
func wantFailure(t *testing.T, r bus.Result, state, code, text string) {
	t.Helper()
	if r.State != state || r.Error == nil || r.Error.Code != code {
		t.Fatalf("call %s: want state %s code %s, got %s", r.ID, state, code, jsonOf(r))
	}
	if textOf(r) == "" {
		t.Fatalf("call %s: error result without a readable text: %s", r.ID, jsonOf(r))
	}
	if text == "" {
		return
	}
	if got := textOf(r); got != text {
		t.Fatalf("call %s: text %q, want %q", r.ID, got, text)
	}
	if r.Error.Message != text {
		t.Errorf("call %s: error.message %q, want %q", r.ID, r.Error.Message, text)
	}
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// waitClosed waits for ch to close, failing the test after bound.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(bound):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// signals is a set of named one-shot signals shared by tools and tests.
type signals struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// ch returns the channel of name, closed once fire(name) is called.
func (s *signals) ch(name string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]chan struct{}{}
	}
	c, ok := s.m[name]
	if !ok {
		c = make(chan struct{})
		s.m[name] = c
	}
	return c
}

// fire closes the channel of name; firing twice is harmless.
func (s *signals) fire(name string) {
	c := s.ch(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-c:
	default:
		close(c)
	}
}

// wait blocks until name fires, ctx ends, or bound elapses; it reports
// whether name fired.
func (s *signals) wait(ctx context.Context, name string) bool {
	select {
	case <-s.ch(name):
		return true
	case <-ctx.Done():
		return false
	case <-time.After(bound):
		return false
	}
}

// collect reads events from ev until stop returns true for one, which is
// included; it fails the test after bound.
func collect(t *testing.T, ev *client.Events, stop func(*bus.Event) bool) []*bus.Event {
	t.Helper()
	var got []*bus.Event
	timeout := time.After(bound)
	for {
		select {
		case e, ok := <-ev.C:
			if !ok {
				t.Fatalf("event stream closed after %d events", len(got))
			}
			got = append(got, e)
			if stop(e) {
				return got
			}
		case <-timeout:
			t.Fatalf("timed out after %d events: %s", len(got), jsonOf(got))
		}
	}
}

// batchDone matches the io.toolbus.batch.done of replyID.
func batchDone(replyID string) func(*bus.Event) bool {
	return func(e *bus.Event) bool { return e.Type == bus.TypeBatchDone && e.ReplyID == replyID }
}

// watch starts watching session's events until the test ends.
func (e *env) watch(t *testing.T, session string) *client.Events {
	t.Helper()
	ev, err := e.client.Watch(t.Context(), session)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, ev.Stop)
	return ev
}

// objectSchema returns an object schema with the given properties JSON and
// required names.
func objectSchema(props string, required ...string) json.RawMessage {
	req, _ := json.Marshal(required)
	if len(required) == 0 {
		return json.RawMessage(`{"type":"object","properties":` + props + `}`)
	}
	return json.RawMessage(`{"type":"object","properties":` + props + `,"required":` + string(req) + `}`)
}

// knownBug skips the test as a known deviation from docs/protocol.md. Set
// TOOLBUS_RUN_BUGS=1 to run such tests anyway, e.g. to see whether a fix
// landed.
func knownBug(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("TOOLBUS_RUN_BUGS") == "" {
		t.Skip("BUG: " + what)
	}
}

// testLogger shows the routers' logs when TOOLBUS_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("TOOLBUS_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
