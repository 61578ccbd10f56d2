package facade

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/mcp/bridge"
)

// MCP tasks are the facade's, not mcp-go's: docs/mcp.md "MCP tasks are the
// facade's, stored in KV".

// rpcMessage is one JSON-RPC message as the facade reads it: a request, a
// notification or a response.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

// parseMessage decodes b as one JSON-RPC message; nil when it is not one.
func parseMessage(b []byte) *rpcMessage {
	var m *rpcMessage
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return m
}

// request reports whether m is a JSON-RPC request (with an id).
func (m *rpcMessage) request() bool {
	return m != nil && m.JSONRPC == mcp.JSONRPC_VERSION && len(m.ID) > 0 && string(m.ID) != "null"
}

// isTaskMessage reports whether m is a request the facade answers itself:
// a tasks/* request or a tools/call with params.task.
func isTaskMessage(m *rpcMessage) bool {
	switch mcp.MCPMethod(m.Method) {
	case mcp.MethodTasksGet, mcp.MethodTasksResult, mcp.MethodTasksCancel, mcp.MethodTasksList, methodTasksUpdate:
		return true
	case mcp.MethodToolsCall:
		var p struct {
			Task json.RawMessage `json:"task"`
		}
		return json.Unmarshal(m.Params, &p) == nil && len(p.Task) > 0 && string(p.Task) != "null"
	case mcp.MethodSubscriptionsListen:
		return listensForTasks(m.Params) // tasks_store.go
	}
	return false
}

// modern reports whether the request states the 2026-07-28 revision in its
// _meta (tasks/* are answered without it: mcp-go's client omits it).
func (m *rpcMessage) modern() bool {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return false
	}
	var v string
	return json.Unmarshal(p.Meta[mcp.MetaKeyProtocolVersion], &v) == nil && mcp.IsModernProtocol(v)
}

type rpcError = mcp.JSONRPCErrorDetails

// taskFront answers a session's task messages on both transports, from the
// bucket's records (store) and this process's tasks (runners).
type taskFront struct {
	session, user string
	store         *kvStore // tasks_store.go
	runners       *taskRunners
	cl            *client.Client         // P.cancel
	listed        func(name string) bool // session.listed
	// The session's parts a task's call goes through.
	calls     *caller
	confirms  *confirmer
	questions *relayer
	send      func(sessionID, method string, params map[string]any) error // MCPServer.SendNotificationToSpecificClient
}

// answer answers m with its JSON-RPC response.
func (s *taskFront) answer(ctx context.Context, m *rpcMessage) []byte {
	result, rerr := s.dispatch(ctx, m)
	if rerr != nil {
		return response(m.ID, nil, rerr)
	}
	raw, err := json.Marshal(result)
	var obj map[string]json.RawMessage
	if err == nil {
		err = json.Unmarshal(raw, &obj)
	}
	if err != nil {
		return response(m.ID, nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: err.Error()})
	}
	if m.modern() {
		kind := mcp.ResultTypeComplete
		if c, created := result.(*mcp.CreateTaskResult); created {
			kind = "task" // the 2026-07-28 tasks extension's discriminator
			// The extension's CreateTaskResult is the Task itself
			// (Result & Task); mcp-go's clients read it under "task".
			raw, _ := json.Marshal(taskView{Task: c.Task, TTLMs: c.Task.TTL, PollIntervalMs: c.Task.PollInterval})
			_ = json.Unmarshal(raw, &obj)
		}
		obj["resultType"], _ = json.Marshal(kind)
	}
	return response(m.ID, obj, nil)
}

// response is the JSON-RPC response to request id: result, or rerr.
func response(id json.RawMessage, result any, rerr *rpcError) []byte {
	resp := map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "id": id}
	if rerr != nil {
		resp["error"] = rerr
	} else {
		resp["result"] = result
	}
	out, _ := json.Marshal(resp)
	return out
}

func (s *taskFront) dispatch(ctx context.Context, m *rpcMessage) (any, *rpcError) {
	switch mcp.MCPMethod(m.Method) {
	case mcp.MethodToolsCall:
		var req mcp.CallToolRequest
		raw, _ := json.Marshal(m)
		if err := json.Unmarshal(raw, &req); err != nil {
			return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: err.Error()}
		}
		return s.start(ctx, req)
	case mcp.MethodSubscriptionsListen:
		return s.listen(ctx, m) // tasks_store.go
	case mcp.MethodTasksList:
		recs, err := s.store.listTasks(ctx, s.session, s.user)
		if err != nil {
			return nil, storeError(err)
		}
		out := mcp.ListTasksResult{Tasks: []mcp.Task{}}
		for _, r := range recs {
			out.Tasks = append(out.Tasks, r.task())
		}
		return &out, nil
	}
	// The others name a task of this session and user.
	var p struct {
		TaskID         string                     `json:"taskId"`
		InputResponses map[string]json.RawMessage `json:"inputResponses"` // tasks/update
	}
	if err := json.Unmarshal(m.Params, &p); err != nil || p.TaskID == "" {
		return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: "params.taskId is required"}
	}
	r, err := s.store.getTask(ctx, s.session, s.user, p.TaskID)
	if err != nil {
		return nil, storeError(err)
	}
	switch mcp.MCPMethod(m.Method) {
	case methodTasksUpdate:
		return s.update(ctx, r, p.InputResponses)
	case mcp.MethodTasksGet:
		if !r.Status.IsTerminal() {
			s.runners.follow(r)
			r.Message = s.runners.withOutput(ctx, r) // shown, not stored
		}
		if m.modern() { // 2026-07-28 shows a completed task's result in it
			if err := (taskResults{s.store}).load(ctx, r); errors.Is(err, errNoStore) {
				return nil, storeError(err)
			}
		}
		return r.detailed(m.modern()), nil
	case mcp.MethodTasksResult:
		return s.result(ctx, r)
	default: // tasks/cancel
		return s.cancelTask(ctx, r)
	}
}

func storeError(err error) *rpcError {
	if errors.Is(err, errNotFound) {
		return &rpcError{Code: mcp.INVALID_PARAMS, Message: errNotFound.Error()}
	}
	return &rpcError{Code: mcp.INTERNAL_ERROR, Message: err.Error()}
}

// start stores the task's record, starts its call and returns the
// CreateTaskResult; an unlisted tool or a failed store publishes nothing.
func (s *taskFront) start(ctx context.Context, req mcp.CallToolRequest) (any, *rpcError) {
	if !s.listed(req.Params.Name) {
		return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("tool '%s' not found", req.Params.Name)}
	}
	ttl := DefaultTaskTTL
	if t := req.Params.Task; t != nil && t.TTL != nil && *t.TTL > 0 {
		ttl = time.Duration(min(*t.TTL, bus.MCPStateMaxAge.Milliseconds())) * time.Millisecond // before it could overflow
	}
	now := time.Now()
	r := &taskRecord{ID: newID(), Session: s.session, User: s.user, Tool: req.Params.Name, CallID: "mcp-" + nuid.Next(),
		ReplyID: client.NewReplyID(), Status: mcp.TaskStatusWorking, Created: now, Updated: now, TTLMS: ttl.Milliseconds()}
	if err := s.store.createTask(ctx, r); err != nil {
		return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: err.Error()}
	}
	header, _ := ctx.Value(contextKey).(string)
	s.runners.run(r, req, header, s, s.notifier(ctx))
	return &mcp.CreateTaskResult{Task: r.task()}, nil
}

// result waits until the task (or the request) ends and returns its
// CallToolResult.
func (s *taskFront) result(ctx context.Context, r *taskRecord) (any, *rpcError) {
	if !r.Status.IsTerminal() {
		s.runners.follow(r)
		wctx, cancel := context.WithDeadline(ctx, r.expires())
		var err error
		r, err = s.store.watchTask(wctx, s.session, s.user, r.ID)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, &rpcError{Code: mcp.REQUEST_INTERRUPTED, Message: ctx.Err().Error()}
			}
			return nil, storeError(err)
		}
	}
	var out map[string]json.RawMessage
	switch r.Status {
	case mcp.TaskStatusFailed:
		return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: r.Error}
	case mcp.TaskStatusCompleted:
		if err := (taskResults{s.store}).load(ctx, r); errors.Is(err, errNoStore) {
			return nil, storeError(err)
		}
		if json.Unmarshal(r.Result, &out) != nil || out == nil {
			return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: "facade: task record without a result"}
		}
	default: // cancelled
		raw, _ := json.Marshal(mcp.NewToolResultError("The task was cancelled: " + r.Message))
		_ = json.Unmarshal(raw, &out)
	}
	out["_meta"], _ = json.Marshal(mcp.RelatedTaskMeta(r.ID))
	return out, nil
}

// cancelTask records the task cancelled, then cancels its call on the bus
// (its bus task when it went on as one, else P.cancel). The record goes
// first so the run's interrupted end does not win the first-end race.
func (s *taskFront) cancelTask(ctx context.Context, r *taskRecord) (any, *rpcError) {
	if r.Status.IsTerminal() {
		return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: "cannot cancel task in terminal status: " + string(r.Status)}
	}
	r, err := s.store.updateTask(ctx, s.session, s.user, r.ID, func(r *taskRecord) {
		r.Status, r.Message = mcp.TaskStatusCancelled, "Task cancelled by request"
	})
	if err != nil {
		return nil, storeError(err)
	}
	if r.Status != mcp.TaskStatusCancelled { // it ended meanwhile
		return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: "cannot cancel task in terminal status: " + string(r.Status)}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if bt := s.runners.tasks; r.BusTask != "" && bt != nil {
		_, err = bt.Cancel(cctx, s.session, r.BusTask)
	} else {
		err = s.cl.Cancel(cctx, s.session, r.ReplyID, r.CallID)
	}
	if err != nil {
		return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: "facade: the task is cancelled, but not its call on the bus: " + err.Error()}
	}
	s.runners.notify(r)
	out := mcp.NewCancelTaskResult(r.task())
	return &out, nil
}

// maxFollowers bounds the tasks one process follows for others (and the
// failures remembered); a failed follow waits followRetry.
const (
	maxFollowers = 1000
	followRetry  = 5 * time.Second
)

// taskRunners are the tasks this process runs, and those it follows.
type taskRunners struct {
	closing context.Context                  // ends when the facade closes
	loop    func(func(context.Context)) bool // life.Loop
	store   *kvStore
	await   func(ctx context.Context, session, replyID, callID string) (*bus.Result, error)
	// tasks are the bus tasks a task's call may go on as (followBus);
	// nil follows none (the handle is then the task's result).
	tasks busTasks
	log   *slog.Logger

	mu       sync.Mutex
	local    map[string]func(*taskRecord) // task id → run here, and how its host is told of a change (nil: it cannot be)
	followed map[string]struct{}          // task id → its end learnt here from the bus
	failed   map[string]time.Time         // task id → when following it last failed
	listens  chan struct{}                // a semaphore of maxListens subscriptions/listen streams of tasks
	outputs  map[string]outputRead        // "<session> <bus task>" → its output as last read for tasks/get
}

// run runs the task's call until it ends (then writes its end) or the facade
// closes; its context is the facade's, never the request's.
func (t *taskRunners) run(r *taskRecord, req mcp.CallToolRequest, header string, h *taskFront, notify func(*taskRecord)) {
	t.mu.Lock()
	t.local[r.ID] = notify
	t.mu.Unlock()
	ctx := context.WithValue(t.closing, contextKey, header)
	spawn(t, t.local, r.ID, func() {
		onPark := func(p bus.Parked, until time.Time) {
			if p.Kind == "confirm" && h.confirms.policy == ConfirmHostUser {
				t.awaitInput(ctx, r, ask{Park: p, ReplyID: r.ReplyID}, confirmParams(p, h.confirms.remember),
					fmt.Sprintf("input required: confirm the call of %s (or answer it on %s)", p.Name, p.Subject))
				return
			}
			_, _ = t.update(ctx, r, func(r *taskRecord) {
				r.Message = fmt.Sprintf("parked: waiting for %s on %s until %s", kindText(p.Kind), p.Subject, until.UTC().Format(time.RFC3339))
			})
		}
		stop := t.showQuestions(ctx, r, h.questions)
		defer stop()
		var handle *bus.TaskHandle
		res, err := h.calls.run(ctx, req, runOpts{callID: r.CallID, replyID: r.ReplyID, keep: true, onPark: onPark,
			onBackground: func(th bus.TaskHandle) { handle = &th }})
		if t.closing.Err() != nil {
			return
		}
		if err == nil && handle != nil && t.tasks != nil {
			// The call goes on as a bus task: the MCP task follows it.
			bres, live, berr := t.followBus(ctx, r, handle.ID)
			if t.closing.Err() != nil || !live {
				return // another process follows it / it ended already
			}
			res, err = bres, berr
		}
		t.finish(ctx, r, res, err)
	})
}

// keepBounded sets (*m)[k] to v in a map made anew (forgetting the others)
// when it is nil or holds most already.
func keepBounded[V any](m *map[string]V, k string, v V, most int) {
	if *m == nil || len(*m) >= most {
		*m = map[string]V{}
	}
	(*m)[k] = v
}

// spawn runs fn on the facade's loop, then forgets id in set (at once
// when the facade is closing).
func spawn[V any](t *taskRunners, set map[string]V, id string, fn func()) {
	done := func() {
		t.mu.Lock()
		delete(set, id)
		t.mu.Unlock()
	}
	if !t.loop(func(context.Context) { defer done(); fn() }) {
		done()
	}
}

// showQuestions makes the task wait for each question its bridged server
// asks of its call (awaitInput), until stop.
func (t *taskRunners) showQuestions(ctx context.Context, r *taskRecord, questions *relayer) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	qs, err := questions.watchCall(ctx, r.Tool, r.CallID)
	if err != nil || qs == nil {
		cancel()
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case a := <-qs:
				params, _ := questionParams(*a.Question, true)
				t.awaitInput(ctx, r, a, params, fmt.Sprintf("input required: waiting for an answer: %s (parked call %s of %s: answer it with toolbus answer, or on %s)",
					questionText(*a.Question), a.Park.ID, a.Park.Name, a.Park.Subject))
			}
		}
	}()
	return func() { cancel(); <-done }
}

// follow learns the end of a task this process does not run from the
// bus, and writes it; at most one follower per task here.
func (t *taskRunners) follow(r *taskRecord) {
	t.mu.Lock()
	_, runs := t.local[r.ID]
	_, follows := t.followed[r.ID]
	// A replay a router refused (its bounds, docs/protocol.md 3.4) is not
	// asked again for followRetry: polls would repeat it every time.
	recent := time.Since(t.failed[r.ID]) < followRetry
	if runs || follows || recent || len(t.followed) >= maxFollowers || t.closing.Err() != nil {
		t.mu.Unlock()
		return
	}
	t.followed[r.ID] = struct{}{}
	t.mu.Unlock()
	spawn(t, t.followed, r.ID, func() {
		ctx, cancel := context.WithDeadline(t.closing, r.expires())
		defer cancel()
		res, err := t.learnEnd(ctx, r)
		if err != nil {
			t.log.Debug("facade: following task", "task", r.ID, "err", err)
			t.mu.Lock()
			keepBounded(&t.failed, r.ID, time.Now(), maxFollowers)
			t.mu.Unlock()
			return
		}
		if res != nil {
			t.finish(ctx, r, res, nil)
		}
	})
}

// learnEnd waits for the end of task r's call on the bus (its bus task's, or
// its result); a nil result: the record ended meanwhile.
func (t *taskRunners) learnEnd(ctx context.Context, r *taskRecord) (*mcp.CallToolResult, error) {
	if r.BusTask != "" && t.tasks != nil {
		res, _, err := t.followBus(ctx, r, r.BusTask)
		return res, err
	}
	res, err := t.await(ctx, r.Session, r.ReplyID, r.CallID)
	if err != nil {
		return nil, err
	}
	if h, ok := backgrounded(res); ok && t.tasks != nil {
		out, _, err := t.followBus(ctx, r, h.ID)
		return out, err
	}
	return toMCP(*res), nil
}

// finish records the task's end (taskResults.end), unless it ended already
// (cancelled), and tells its host when it runs here.
func (t *taskRunners) finish(ctx context.Context, r *taskRecord, res *mcp.CallToolResult, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var result json.RawMessage
	if err == nil && res != nil {
		result, _ = json.Marshal(res)
	}
	rec, uerr := taskResults{t.store}.end(ctx, r.Session, r.User, r.ID, result, func(r *taskRecord) {
		r.Inputs = nil
		switch {
		case err != nil:
			r.Status, r.Error = mcp.TaskStatusFailed, err.Error()
		case res == nil:
			r.Status, r.Error = mcp.TaskStatusFailed, "facade: no result"
		default:
			r.Status, r.Message = mcp.TaskStatusCompleted, ""
		}
	})
	t.notify(rec)
	if uerr != nil {
		t.log.Warn("facade: task end not recorded", "task", r.ID, "err", uerr)
	}
}

// update applies change to task r's record (kvStore.updateTask) and tells
// its host when it runs here.
func (t *taskRunners) update(ctx context.Context, r *taskRecord, change func(*taskRecord)) (*taskRecord, error) {
	rec, err := t.store.updateTask(ctx, r.Session, r.User, r.ID, change)
	t.notify(rec)
	return rec, err
}

// awaitResult waits for the result of call callID of batch replyID in
// session, from the session's stored events on (a router's replay,
// docs/protocol.md 3.4): one published before this began is seen too.
func (f *Facade) awaitResult(ctx context.Context, session, replyID, callID string) (*bus.Result, error) {
	ev, err := f.cl.Replay(ctx, session)
	if err != nil {
		return nil, err
	}
	defer func() { _ = ev.Stop(context.WithoutCancel(ctx)) }()
	return bridge.AwaitResult(ctx, ev, replyID, callID)
}

// interceptStdio answers in front of mcp-go's stdio server the lines take
// takes, each in its own goroutine, passing the others on; both write
// through one lock.
func interceptStdio(ctx context.Context, in io.Reader, out io.Writer, take func(*rpcMessage) (func(context.Context) []byte, bool)) (io.Reader, io.Writer) {
	lw := &lockedWriter{w: out}
	pr, pw := io.Pipe()
	ctx = context.WithValue(ctx, notifySessionKey{}, "stdio") // mcp-go's stdio session
	ctx = withStream(ctx, func(msg []byte) error { _, err := lw.Write(append(msg, '\n')); return err })
	go func() {
		br := bufio.NewReader(in)
		for {
			line, err := br.ReadBytes('\n')
			if len(bytes.TrimSpace(line)) > 0 {
				if answer, ok := take(parseMessage(line)); ok {
					go func() { _, _ = lw.Write(append(answer(ctx), '\n')) }()
				} else if _, werr := pw.Write(line); werr != nil {
					return
				}
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	context.AfterFunc(ctx, func() { pw.CloseWithError(io.EOF) })
	return pr, lw
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// The tasks extension's input (2026-07-28): docs/mcp.md "Tasks: input".

const methodTasksUpdate = "tasks/update"

// taskInput is one request a task waits for its host to answer.
type taskInput struct {
	ask
	Kind    string          `json:"kind"`    // ask.key, for the record's reader
	Request json.RawMessage `json:"request"` // {"method": "elicitation/create", "params": ...}
}

// awaitInput records in the task that it waits for a (params: what its host
// is shown) under <kind>-<park id>, a key never reused: input_required with
// message.
func (t *taskRunners) awaitInput(ctx context.Context, r *taskRecord, a ask, params mcp.ElicitationParams, message string) {
	req, _ := json.Marshal(map[string]any{"method": mcp.MethodElicitationCreate, "params": params})
	_, _ = t.update(ctx, r, func(r *taskRecord) {
		if r.Inputs == nil {
			r.Inputs = map[string]taskInput{}
		}
		r.Inputs[a.key()+"-"+a.Park.ID] = taskInput{ask: a, Kind: a.key(), Request: req}
		r.Status, r.Message = mcp.TaskStatusInputRequired, message
	})
}

// taskView is a task as tasks/get and notifications/tasks show it, with
// the extension's members: inputRequests, the result or error at
// 2026-07-28, and ttlMs and pollIntervalMs beside ttl and pollInterval.
type taskView struct {
	mcp.Task
	TTLMs          *int64                     `json:"ttlMs,omitempty"`
	PollIntervalMs *int64                     `json:"pollIntervalMs,omitempty"`
	InputRequests  map[string]json.RawMessage `json:"inputRequests,omitempty"`
	Result         json.RawMessage            `json:"result,omitempty"`
	Error          *rpcError                  `json:"error,omitempty"`
	Meta           map[string]any             `json:"_meta,omitempty"`
}

func (r *taskRecord) detailed(modern bool) *taskView {
	v := &taskView{Task: r.task()}
	if len(r.Inputs) > 0 && r.Status == mcp.TaskStatusInputRequired {
		v.InputRequests = make(map[string]json.RawMessage, len(r.Inputs))
		for k, in := range r.Inputs {
			v.InputRequests[k] = in.Request
		}
	}
	if !modern {
		return v
	}
	v.TTLMs, v.PollIntervalMs = v.TTL, v.PollInterval
	switch r.Status {
	case mcp.TaskStatusCompleted:
		v.Result = r.Result
	case mcp.TaskStatusFailed:
		v.Error = &rpcError{Code: mcp.INTERNAL_ERROR, Message: r.Error}
	}
	return v
}

// update answers tasks/update: responses to keys the task waits for are the
// host's answers, others ignored; it works again once none is outstanding.
// A confirmation only under host_user (ask.answerable): the task is
// the user's, whatever credential made it.
func (s *taskFront) update(ctx context.Context, r *taskRecord, responses map[string]json.RawMessage) (any, *rpcError) {
	var answered []string
	for key, raw := range responses {
		in, ok := r.Inputs[key]
		var res mcp.ElicitationResult
		if !ok || r.Status != mcp.TaskStatusInputRequired || json.Unmarshal(raw, &res) != nil || res.Action == "" ||
			!in.ask.answerable(s.confirms.policy) {
			continue
		}
		s.confirms.reply(ctx, in.ask, &res)
		answered = append(answered, key)
	}
	if len(answered) > 0 {
		_, err := s.runners.update(ctx, r, func(r *taskRecord) {
			for _, k := range answered {
				delete(r.Inputs, k)
			}
			if len(r.Inputs) == 0 && r.Status == mcp.TaskStatusInputRequired {
				r.Status, r.Message = mcp.TaskStatusWorking, "answered: "+strings.Join(answered, ", ")
			}
		})
		if err != nil {
			return nil, storeError(err)
		}
	}
	return &mcp.EmptyResult{}, nil
}

// notifySessionKey carries, in a task message's context, the MCP
// session its client is told of the task's changes on.
type notifySessionKey struct{}

// notifier returns how ctx's MCP session is told of a task's change
// (notifications/tasks/status, 2025-11-25); nil when it has none
// (2026-07-28 uses listen).
func (s *taskFront) notifier(ctx context.Context) func(*taskRecord) {
	sid, _ := ctx.Value(notifySessionKey{}).(string)
	if sid == "" {
		return nil
	}
	return func(r *taskRecord) {
		var params map[string]any
		raw, _ := json.Marshal(r.detailed(false))
		_ = json.Unmarshal(raw, &params)
		_ = s.send(sid, mcp.MethodNotificationTasksStatus, params)
	}
}

// notify tells the host of the task run here that r changed.
func (t *taskRunners) notify(r *taskRecord) {
	if r == nil {
		return
	}
	t.mu.Lock()
	n := t.local[r.ID]
	t.mu.Unlock()
	if n != nil {
		n(r)
	}
}

// An MCP task whose call goes on as a bus task (docs/protocol.md 5.10)
// follows it: the record names it (BusTask), any process waits for it, and
// tasks/cancel cancels it.

// busTasks is what following bus tasks needs (client.Tasks).
type busTasks interface {
	Get(ctx context.Context, session, id string) (bus.Task, error)
	Wait(ctx context.Context, session string, timeout time.Duration, ids ...string) ([]bus.Task, error)
	Cancel(ctx context.Context, session, id string) (bus.Task, error)
	Output(ctx context.Context, session, id string) (bus.Task, []bus.Block, error)
}

var _ busTasks = client.Tasks{}

// busWaitEach bounds one wait verb (a router handler held meanwhile);
// busRetryMax bounds the pause after a wait that got no answer.
const (
	busWaitEach = 60 * time.Second
	busRetryMax = 5 * time.Second
)

// awaitBusTask waits until session's bus task id (or ctx) ends and returns
// its result, asking again with a growing pause when no router answered; a
// refusal, or a task not of call callID of replyID, ends it.
func awaitBusTask(ctx context.Context, bt busTasks, session, id, replyID, callID string) (*bus.Result, error) {
	pause := 100 * time.Millisecond
	for {
		wait := busWaitEach
		if d, ok := ctx.Deadline(); ok {
			wait = max(min(wait, time.Until(d)), time.Millisecond)
		}
		ts, err := bt.Wait(ctx, session, wait, id)
		var be *bus.Error
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &be) && (be.Code == bus.CodeUnknownTask || be.Code == bus.CodeBadRequest):
			return nil, fmt.Errorf("facade: bus task %s: %w", id, err)
		case err != nil:
			if err := bus.Sleep(ctx, pause); err != nil {
				return nil, err
			}
			pause = min(2*pause, busRetryMax)
			continue
		case len(ts) == 1 && (ts[0].ReplyID != replyID || ts[0].CallID != callID):
			return nil, fmt.Errorf("facade: bus task %s is not the task's call %s", id, callID)
		case len(ts) == 1 && !ts[0].Running():
			if ts[0].Result == nil {
				return nil, fmt.Errorf("facade: bus task %s ended %s without a result", id, ts[0].State)
			}
			return ts[0].Result, nil
		}
		pause = 100 * time.Millisecond
	}
}

// checkBusTask checks (three tries) that bus task id is task r's call before
// the record names it, so another call's handle is never followed.
func checkBusTask(ctx context.Context, bt busTasks, r *taskRecord, id string) error {
	var err error
	for try := range 3 {
		if try > 0 && bus.Sleep(ctx, time.Duration(try)*200*time.Millisecond) != nil {
			return ctx.Err()
		}
		var bt1 bus.Task
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		bt1, err = bt.Get(cctx, r.Session, id)
		cancel()
		var be *bus.Error
		switch {
		case err == nil && (bt1.ReplyID != r.ReplyID || bt1.CallID != r.CallID):
			return fmt.Errorf("facade: bus task %s is not the task's call %s", id, r.CallID)
		case err == nil:
			return nil
		case errors.As(err, &be):
			return fmt.Errorf("facade: bus task %s: %w", id, err)
		}
	}
	return fmt.Errorf("facade: bus task %s: %w", id, err)
}

// HandleMetaKey is the _meta member of a tools/call result whose call went
// on as a bus task: the handle ({"id", "state", "subject"}, docs/protocol.md
// 5.10), for hosts that follow it on the bus.
const HandleMetaKey = "io.toolbus/task"

// handleOf returns the handle toMCP put into res.
func handleOf(res *mcp.CallToolResult) (bus.TaskHandle, bool) {
	if res == nil || res.Meta == nil {
		return bus.TaskHandle{}, false
	}
	h, ok := res.Meta.AdditionalFields[HandleMetaKey].(bus.TaskHandle)
	return h, ok
}

// handleWithoutSchema keeps a handle result of a tool listed with an
// outputSchema isError, since hosts check only successful results against
// the schema (docs/mcp.md, F1); its first text says the call did not fail.
func handleWithoutSchema(res *mcp.CallToolResult) bool {
	h, ok := handleOf(res)
	if !ok || res.StructuredContent != nil {
		return false
	}
	res.IsError = true
	note := fmt.Sprintf("Not a failure: the call goes on in the background as task %s (this result is marked as an error "+
		"only because a task handle is not the structured content the tool's output schema describes).", h.ID)
	res.Content = append([]mcp.Content{mcp.NewTextContent(note)}, res.Content...)
	return true
}

// maxStatusOutput bounds the output so far (its last bytes) in a task's
// status message; one output read serves outputEvery, so polling hosts do
// not each cost one, and maxOutputCache bounds the reads kept.
const (
	maxStatusOutput = 1024
	outputEvery     = 2 * time.Second
	maxOutputCache  = 1000
)

type outputRead struct {
	at   time.Time
	text string
}

// withOutput returns r's status message with the output so far of its
// bus task (readOutput); r's message alone when there is none.
func (t *taskRunners) withOutput(ctx context.Context, r *taskRecord) string {
	if t.tasks == nil || r.BusTask == "" || r.Status.IsTerminal() {
		return r.Message
	}
	key := r.Session + " " + r.BusTask
	t.mu.Lock()
	last, ok := t.outputs[key]
	t.mu.Unlock()
	if !ok || time.Since(last.at) >= outputEvery {
		last = outputRead{at: time.Now(), text: t.readOutput(ctx, r)}
		t.mu.Lock()
		keepBounded(&t.outputs, key, last, maxOutputCache)
		t.mu.Unlock()
	}
	if last.text == "" {
		return r.Message
	}
	return r.Message + "; output so far: " + last.text
}

// readOutput reads the last maxStatusOutput bytes of the text of r's bus
// task's output so far, marked with "…" when cut; "" when there is none,
// the bus task is not r's call or the verb fails.
func (t *taskRunners) readOutput(ctx context.Context, r *taskRecord) string {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tk, out, err := t.tasks.Output(cctx, r.Session, r.BusTask)
	if err != nil || tk.ReplyID != r.ReplyID || tk.CallID != r.CallID {
		return ""
	}
	text := blocksText(out)
	if len(text) > maxStatusOutput {
		return "…" + offload.Suffix(text, maxStatusOutput)
	}
	return text
}

func backgrounded(r *bus.Result) (bus.TaskHandle, bool) {
	if r == nil || r.State != bus.StateBackground || r.Task == nil || !bus.ValidID(r.Task.ID) {
		return bus.TaskHandle{}, false
	}
	return *r.Task, true
}

// followBus records that task r's call goes on as bus task id and waits for
// its end within the record's TTL; live is false when the record had ended
// (the bus task is then cancelled) or no bus tasks can be followed.
func (t *taskRunners) followBus(ctx context.Context, r *taskRecord, id string) (res *mcp.CallToolResult, live bool, err error) {
	if t.tasks == nil {
		return nil, false, nil
	}
	if r.BusTask != id {
		if err := checkBusTask(ctx, t.tasks, r, id); err != nil {
			return nil, true, err
		}
		rec, uerr := t.store.updateTask(ctx, r.Session, r.User, r.ID, func(r *taskRecord) {
			r.BusTask = id
			r.Message = fmt.Sprintf("running in the background as bus task %s (past the tool's timeout)", id)
		})
		if uerr == nil && rec.Status.IsTerminal() {
			// Cancelled meanwhile: so is the bus task (or it ends at its deadline).
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if _, err := t.tasks.Cancel(cctx, r.Session, id); err != nil {
				t.log.Warn("facade: bus task not cancelled", "task", id, "err", err)
			}
			return nil, false, nil
		}
		if uerr == nil {
			t.notify(rec)
		}
	}
	wctx, cancel := context.WithDeadline(ctx, r.expires())
	defer cancel()
	out, err := awaitBusTask(wctx, t.tasks, r.Session, id, r.ReplyID, r.CallID)
	if err != nil {
		return nil, true, err
	}
	return toMCP(*out), true, nil
}
