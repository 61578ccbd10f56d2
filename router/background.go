package router

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/life"
	"github.com/toolbus/toolbus/ledger"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/tasks"
)

// TasksConfig configures background tasks (docs/protocol.md 5.10).
type TasksConfig struct {
	// Off serves no tasks: such calls end at their timeout as before.
	Off bool
	// MaxPerSession and MaxPerUser bound the running tasks, MaxKept those
	// a session keeps (tasks.Config); zero: tasks' defaults.
	MaxPerSession, MaxPerUser, MaxKept int
	// MaxRun bounds a task's run from its call's start; zero means DefaultTaskRun.
	MaxRun time.Duration
	// Keep is how long a task's record outlives its last change; zero: tasks.DefaultKeep.
	Keep time.Duration
}

// DefaultTaskRun is TasksConfig.MaxRun's default.
const DefaultTaskRun = time.Hour

// background runs the router's side of tasks and serves P.tasks.<session>.
type background struct {
	*wire
	r   *Router
	st  *tasks.Store
	cfg TasksConfig

	running sync.Map // task id → ownedTask: the runs this router owns
	flights sync.Map // call key → *flight: the calls run here before their handoff
	// cursors: where this router's last output read of a task ended, so the
	// next goes on from there (docs/security.md, TestAttackTaskOutputPolled)
	cursors *lru.Cache[string, tasks.Cursor]
}

// outputCursors bounds the tasks whose last output read a router keeps
// (each with at most bus.MaxTaskOutputLen of output).
const outputCursors = 256

type ownedTask struct {
	session string
	cancel  context.CancelFunc
}

// newBackground sets tasks up, adding their route and loop (nil when off).
func newBackground(ctx context.Context, r *Router) (*background, error) {
	cfg := r.cfg.Tasks
	if cfg.Off {
		return nil, nil
	}
	cfg.MaxRun = cmp.Or(max(cfg.MaxRun, 0), DefaultTaskRun)
	kv, err := tasks.Setup(ctx, r.store.JS, r.subj, r.cfg.Store.Replicas, cfg.Keep, r.cfg.Store.TasksMaxBytes)
	if err != nil {
		return nil, err
	}
	r.tasksBound.Store(store.BoundOf(kv))
	cursors, _ := lru.New[string, tasks.Cursor](outputCursors) // fails only for a size below 1
	b := &background{wire: r.wire, r: r, cfg: cfg, cursors: cursors,
		st: tasks.New(kv, tasks.Config{MaxPerSession: cfg.MaxPerSession, MaxPerUser: cfg.MaxPerUser, MaxKept: cfg.MaxKept,
			Keep: cfg.Keep, Landing: r.life.Landing})}
	verbs := &taskVerbs{b}
	r.handlers = append(r.handlers, route{r.subj.All("tasks"), r.subj.RouterQueue(), verbs.onTasks, nil})
	r.life.Loop(func(ctx context.Context) { life.Every(ctx, r.cfg.Store.Heartbeat, b.tick) })
	return b, nil
}

// mayBackground: the tool declares it, or the call asks and the tool does
// not refuse (no_background); never an external, state-injected or cached tool.
func mayBackground(j *job) bool {
	d := &j.tool.Def
	return (d.Background || j.call.Background && !d.NoBackground) && !d.External && !d.StateInjected && d.CacheTTLMS == 0
}

// run runs j with the task's long deadline and waits up to j's own; past
// that the call goes on as a task, its handle the result. A re-sent copy
// meets the task: running here (flight), stored, or at tasks.Store.Admit.
func (b *background) run(ctx context.Context, j *job) bus.Result {
	start := time.Now()
	deadline, timeout := callDeadline(start, j.tool.Def.TimeoutMS, j.deadline)
	if timeout <= 0 {
		return b.r.tools.runTool(ctx, j)
	}
	f := &flight{done: make(chan struct{})}
	if first, ok := b.flights.LoadOrStore(j.key(), f); ok {
		b.r.m.DedupeHits.Inc()
		b.log.Debug("router: a copy of the call waits for its run here", "call", j.key())
		return first.(*flight).wait(ctx, j.call)
	}
	f.res = b.runFirst(ctx, j, start, deadline, timeout)
	close(f.done)
	b.flights.CompareAndDelete(j.key(), f)
	return f.res
}

// flight is a call run here as a possible task, for copies that come meanwhile.
type flight struct {
	done chan struct{} // closed once res is set
	res  bus.Result
}

// wait is the result of copy c of the call f runs; a cancel of c's batch
// (ctx) ends the wait, ctx's deadline does not (the first run's is earlier).
func (f *flight) wait(ctx context.Context, c bus.Call) bus.Result {
	select {
	case <-f.done:
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.Canceled) {
			select {
			case <-f.done:
			default:
				return interrupted(c)
			}
		}
		<-f.done
	}
	res := f.res // the outcome is shared: copy what a batch may change
	res.Output, res.Metadata = slices.Clone(res.Output), slices.Clone(res.Metadata)
	if res.Task != nil {
		res.Task = new(*res.Task)
	}
	if res.Error != nil {
		res.Error = new(*res.Error)
	}
	return res
}

// runFirst is run of the first copy of j on this router, started at start.
func (b *background) runFirst(ctx context.Context, j *job, start, deadline time.Time, timeout time.Duration) bus.Result {
	rec := b.record(j, start)
	// An earlier copy's task: nothing runs (a failed read: they meet at Admit).
	gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
	got, err := b.st.Get(gctx, rec.Session, rec.ID)
	gcancel()
	if err == nil {
		b.r.m.DedupeHits.Inc()
		return b.handle(j.call, got, timeout)
	} else if !errors.Is(err, tasks.ErrUnknown) {
		b.log.Warn("router: background task not read", "task", rec.ID, "err", err)
	}
	runCtx, cancel := b.runContext()
	// A cancel of the batch ends the run until the handoff; ctx's deadline does not.
	cancelled := make(chan bool, 1)
	unlink := context.AfterFunc(ctx, func() {
		by := errors.Is(ctx.Err(), context.Canceled)
		if by {
			cancel()
		}
		cancelled <- by
	})
	done := make(chan bus.Result, 1)
	if !b.r.life.Loop(func(context.Context) { done <- b.r.tools.runTool(runCtx, b.longJob(rec, j.tool, j.trace)) }) {
		cancel()
		return b.r.tools.runTool(ctx, j)
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case res := <-done:
		unlink()
		cancel()
		return res
	case <-t.C:
	}
	if !unlink() && <-cancelled { // the batch was cancelled: the run ends interrupted
		return <-done
	}
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer acancel()
	got, created, err := b.st.Admit(actx, rec)
	if err != nil {
		cancel()
		<-done
		if be, ok := errors.AsType[*bus.Error](err); ok && be.Code == bus.CodeLimitExceeded {
			return bus.ErrorResult(j.call, bus.CodeLimitExceeded, fmt.Sprintf("%s The call was stopped at its timeout of %s.", be.Message, timeout))
		}
		b.log.Warn("router: background task not stored", "call", j.key(), "err", err)
		return timeoutResult(j.call, timeout)
	}
	if !created { // a copy of the call on another router made the task first
		b.r.m.DedupeHits.Inc()
		b.drop(j, done, cancel)
		return b.handle(j.call, got, timeout)
	}
	b.track(rec, cancel)
	if !b.r.life.Loop(func(lctx context.Context) { b.follow(lctx, rec, done, cancel) }) {
		cancel() // stopping: another router takes the task over
	}
	return b.handle(j.call, rec, timeout)
}

// drop ends this router's part in a run another copy's task follows: a
// call outside the ledger is abandoned (uncancelled: that would stop the
// task's run too); one through it runs on, for the task's router to read.
func (b *background) drop(j *job, done <-chan bus.Result, cancel context.CancelFunc) {
	b.log.Debug("router: another copy of the call made its task first", "call", j.key())
	if d := &j.tool.Def; d.ReadOnly && !d.Durable {
		cancel()
		<-done
		return
	}
	if !b.r.life.Loop(func(context.Context) { <-done; cancel() }) {
		<-done // stopping: the drain's deadline ends the run, as the task's own
		cancel()
	}
}

// runContext is a task's run context, ended by its cancel and the router's stop.
func (b *background) runContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(b.r.base))
	stop := context.AfterFunc(b.r.life.Background(), func() { cancel(errDrainDeadline) })
	return ctx, func() { stop(); cancel(context.Canceled) }
}

// record is the task of job j, started at start.
func (b *background) record(j *job, start time.Time) *tasks.Record {
	d := &j.tool.Def
	return &tasks.Record{Task: bus.Task{ID: tasks.ID(j.session, j.replyID, j.call.ID), Session: j.session, ReplyID: j.replyID, CallID: j.call.ID,
		Tool: j.call.Name, State: bus.StateBackground, Started: start.UTC(), Deadline: start.Add(b.cfg.MaxRun).UTC()},
		Owner: b.r.cfg.ID, Lease: time.Now().Add(b.r.cfg.Lease), Input: j.call.Input, User: j.user, Context: j.context,
		UserKey: userKey(b.r.cfg.Identities, j), Rerun: d.ReadOnly || d.Idempotent, Durable: d.Durable, Runs: 1}
}

// userKey is the bound j's task counts against beside its session's: its
// user's, tasks.SharedKey for a shared agent's session, else none
// (docs/tasks.md).
func userKey(ids Identities, j *job) string {
	if k := tasks.UserKey(j.user); k != "" {
		return k
	}
	if sharedAgents(ids, j.session) {
		return tasks.SharedKey
	}
	return ""
}

// longJob is rec's call to run until the task's deadline.
func (b *background) longJob(rec *tasks.Record, tool *registry.Tool, trace [2]string) *job {
	t := *tool
	t.Def.TimeoutMS = max(time.Until(rec.Deadline).Milliseconds(), 1)
	return &job{session: rec.Session, replyID: rec.ReplyID, trace: trace, user: rec.User, context: rec.Context,
		call: bus.Call{ID: rec.CallID, Name: rec.Tool, Input: rec.Input}, tool: &t}
}

// handle is the result of a call that went on as task rec.
func (b *background) handle(c bus.Call, rec *tasks.Record, after time.Duration) bus.Result {
	// The tools named are builtin.RegisterTasks'.
	text := fmt.Sprintf("<system-reminder>Tool '%s' is running in background (id=%s) for over %s. "+
		"Continue with other independent work; its result comes when it finishes. To read its output so far call "+
		"task_output, to wait for it wait_async_results, to stop it ToolStop.</system-reminder>", c.Name, rec.ID, after)
	return bus.Result{ID: c.ID, Name: c.Name, State: bus.StateBackground, Output: bus.Text(text),
		Task: &bus.TaskHandle{ID: rec.ID, State: bus.StateBackground, Subject: b.subj.Tasks(rec.Session)}}
}

func (b *background) track(rec *tasks.Record, cancel context.CancelFunc) {
	b.running.Store(rec.ID, ownedTask{session: rec.Session, cancel: cancel})
}

// follow waits for rec's run and ends the task (not when cut off by a stop).
func (b *background) follow(lctx context.Context, rec *tasks.Record, done <-chan bus.Result, cancel context.CancelFunc) {
	res := <-done
	for rerun(rec, res) && lctx.Err() == nil {
		ctx, c := b.runContext()
		b.track(rec, c)
		cancel = c
		res = b.runAgain(ctx, rec)
	}
	b.running.Delete(rec.ID)
	cancel()
	if lctx.Err() != nil && cutOff(res) {
		return
	}
	b.end(lctx, rec, res)
}

// rerun: the run lost its worker, and may run again (at most three runs).
func rerun(rec *tasks.Record, res bus.Result) bool {
	return res.Error != nil && res.Error.Code == bus.CodeUnknownOutcome && rec.Rerun && rec.Runs < 3 && time.Now().Before(rec.Deadline)
}

// cutOff: a result that only says the run was stopped.
func cutOff(res bus.Result) bool {
	return res.Error != nil && (res.Error.Code == bus.CodeInterrupted || res.Error.Code == bus.CodeUnknownOutcome)
}

// runAgain starts another run of rec's call on this router.
func (b *background) runAgain(ctx context.Context, rec *tasks.Record) bus.Result {
	c := bus.Call{ID: rec.CallID, Name: rec.Tool}
	t, ok := b.r.reg.Lookup(rec.Tool)
	if !ok {
		return unavailable(c)
	}
	uctx, ucancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := b.st.Update(uctx, rec.Session, rec.ID, func(r *tasks.Record) error { r.Runs++; return nil })
	ucancel()
	if err != nil {
		return internal(c, err)
	}
	rec.Runs++
	return b.r.tools.runTool(ctx, b.longJob(rec, t, [2]string{}))
}

// end records rec's result and publishes task.done when that ended it.
func (b *background) end(ctx context.Context, rec *tasks.Record, res bus.Result) {
	// A loop's, which a drain does not await: bounded on its own, past ctx.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	got, ended, err := b.st.Finish(ctx, rec.Session, rec.ID, res)
	if err != nil {
		b.log.Warn("router: background task end not stored", "task", rec.ID, "err", err)
		return
	}
	if ended {
		b.publish(b.subj.Events(got.Session), bus.TypeTaskDone, got, got.CallID, got.Task)
	}
}

// publish sends an event of typ about task rec (and callID) on subject.
func (b *background) publish(subject, typ string, rec *tasks.Record, callID string, data any) {
	e, err := bus.NewEvent(typ, b.source, data)
	if err == nil {
		e.SessionID, e.ReplyID, e.ToolCallID = rec.Session, rec.ReplyID, callID
		err = bus.Publish(b.nc, subject, e)
	}
	if err != nil {
		b.log.Warn("router: task event not published", "type", typ, "task", rec.ID, "err", err)
	}
}

// tick renews the leases of the runs owned here and takes over lapsed ones.
func (b *background) tick(now time.Time) {
	ctx, cancel := context.WithTimeout(b.r.life.Background(), b.r.cfg.Store.Heartbeat)
	defer cancel()
	lease := now.Add(b.r.cfg.Lease)
	for id, o := range b.running.Range {
		if held, err := b.st.Renew(ctx, o.(ownedTask).session, id.(string), b.r.cfg.ID, lease); err == nil && !held {
			o.(ownedTask).cancel()
		}
	}
	running, err := b.st.Running(ctx)
	if err != nil {
		return
	}
	for _, rec := range running {
		if _, ok := b.running.Load(rec.ID); ok || rec.Lease.After(now) {
			continue
		}
		if got, ok, err := b.st.Claim(ctx, rec.Session, rec.ID, b.r.cfg.ID, now, lease); err == nil && ok {
			b.resume(got)
		}
	}
}

// resume follows a task taken over: awaited, run again, or unknown.
func (b *background) resume(rec *tasks.Record) {
	b.log.Info("router: background task taken over", "task", rec.ID, "tool", rec.Tool)
	ctx, cancel := b.runContext()
	b.track(rec, cancel)
	ok := b.r.life.Loop(func(lctx context.Context) {
		c := bus.Call{ID: rec.CallID, Name: rec.Tool}
		var res bus.Result
		switch {
		case rec.Durable:
			wctx, wcancel := context.WithDeadline(ctx, rec.Deadline)
			r, _, ok := b.r.led.Await(wctx, bus.CallKey(rec.Session, rec.ReplyID, rec.CallID))
			wcancel()
			if res = r; !ok {
				res = timeoutResult(c, rec.Deadline.Sub(rec.Started))
				if ctx.Err() != nil {
					res = interrupted(c)
				}
			}
		case rec.Rerun:
			res = b.runAgain(ctx, rec)
		default:
			res = ledger.UnknownOutcome(c)
		}
		done := make(chan bus.Result, 1)
		done <- res
		b.follow(lctx, rec, done, cancel)
	})
	if !ok {
		b.running.Delete(rec.ID)
		cancel()
	}
}

// taskVerbs serves the task verbs on P.tasks.<session>.
type taskVerbs struct{ *background }

// onTasks serves one task verb.
func (b *taskVerbs) onTasks(m *nats.Msg) {
	b.serve(m, "tasks", bus.TypeTaskQuery, bus.TypeTaskReply, func(e *bus.Event) (any, error) {
		var q bus.TaskQuery
		if err := json.Unmarshal(e.Data, &q); err != nil {
			return nil, bus.Errorf(bus.CodeBadRequest, "a task query is {\"op\", \"ids\", \"timeout_ms\", \"any\"}: %v", err)
		}
		if err := checkQuery(&q); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(b.r.base, time.Duration(q.TimeoutMS)*time.Millisecond+10*time.Second)
		defer cancel()
		return b.query(ctx, e.SessionID, q)
	})
}

// checkQuery validates a task query and bounds its wait.
func checkQuery(q *bus.TaskQuery) error {
	switch q.Op {
	case bus.TaskList:
		if len(q.IDs) > 0 {
			return bus.Errorf(bus.CodeBadRequest, "list takes no ids")
		}
	case bus.TaskGet, bus.TaskWait:
		if len(q.IDs) == 0 || len(q.IDs) > bus.MaxTaskIDs {
			return bus.Errorf(bus.CodeBadRequest, "%s takes 1 to %d task ids", q.Op, bus.MaxTaskIDs)
		}
	case bus.TaskCancel, bus.TaskOutput:
		if len(q.IDs) != 1 {
			return bus.Errorf(bus.CodeBadRequest, "%s takes exactly one task id", q.Op)
		}
	default:
		return bus.Errorf(bus.CodeBadRequest, "unknown task verb %q (get, list, wait, cancel, output)", q.Op)
	}
	for _, id := range q.IDs {
		if !bus.ValidID(id) {
			return bus.Errorf(bus.CodeBadRequest, "invalid task id %q", id)
		}
	}
	if q.Op != bus.TaskWait {
		q.TimeoutMS = 0
	} else if q.TimeoutMS <= 0 {
		q.TimeoutMS = bus.DefaultTaskWait
	}
	q.TimeoutMS = min(q.TimeoutMS, bus.MaxTaskWaitMS)
	return nil
}

// query runs one task verb for session.
func (b *taskVerbs) query(ctx context.Context, session string, q bus.TaskQuery) (*bus.TaskReply, error) {
	var recs []*tasks.Record
	var err error
	reply := &bus.TaskReply{}
	switch q.Op {
	case bus.TaskList:
		recs, err = b.st.List(ctx, session)
	case bus.TaskGet:
		for _, id := range q.IDs {
			r, gerr := b.st.Get(ctx, session, id)
			if gerr != nil {
				return nil, gerr
			}
			recs = append(recs, r)
		}
	case bus.TaskWait:
		wctx, cancel := context.WithTimeout(ctx, time.Duration(q.TimeoutMS)*time.Millisecond)
		recs, err = b.st.Wait(wctx, session, q.IDs, q.Any)
		cancel()
	case bus.TaskCancel:
		r, ended, cerr := b.st.Cancel(ctx, session, q.IDs[0])
		if cerr == nil && ended {
			b.stopRun(r)
			b.publish(b.subj.Events(r.Session), bus.TypeTaskDone, r, r.CallID, r.Task)
		}
		recs, err = []*tasks.Record{r}, cerr
	case bus.TaskOutput:
		r, gerr := b.st.Get(ctx, session, q.IDs[0])
		if recs, err = []*tasks.Record{r}, gerr; err == nil {
			cur, _ := b.cursors.Get(r.Session + "." + r.ID) // a copy: reads at once each go on from it
			reply.Output, reply.Truncated, err = tasks.Output(ctx, b.r.store.JS, b.subj.Stream(bus.StreamEvents),
				b.subj.Events(session), r, bus.MaxTaskOutputLen, &cur)
			if err == nil {
				b.cursors.Add(r.Session+"."+r.ID, cur)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	reply.Tasks = make([]bus.Task, 0, len(recs))
	for _, r := range recs {
		reply.Tasks = append(reply.Tasks, r.Task)
	}
	return reply, nil
}

// stopRun stops a cancelled task's run, here when owned and at its worker.
func (b *background) stopRun(rec *tasks.Record) {
	if o, ok := b.running.Load(rec.ID); ok {
		o.(ownedTask).cancel()
	}
	b.publish(b.subj.Cancel(rec.Session), bus.TypeCallCancel, rec, "", bus.Cancel{Calls: []string{rec.CallID}, Task: rec.ID})
}
