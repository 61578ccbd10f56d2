package router

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/session"
	"github.com/toolbus/toolbus/skills"
)

// The ports of the batch pipeline: what a step needs from outside the
// batch, as small interfaces with fakes (ports_test.go); newPipeline wires
// them from a running Router (docs/router.md).

// sessionPort is the session as the steps of a batch see it.
type sessionPort interface {
	// Snapshot makes the session current for a run of a batch: read from
	// KV unless rev (the batch's sessionrev) lets the cache serve
	// (package session); the session it returns is what the run decides with.
	Snapshot(ctx context.Context, id string, rev uint64) *groups.Session
	// Session is the session as this router last read or wrote it.
	Session(id string) *groups.Session
	// Revision is the session's KV revision as this router knows it.
	Revision(id string) uint64
	// Touch keeps a session in use from expiring.
	Touch(ctx context.Context, id string) error
	// Reset runs reset_tools.
	Reset(ctx context.Context, id string, input json.RawMessage) (string, error)
}

// resolverPort says what a call's name runs in a session.
type resolverPort interface {
	// resolve resolves name against the session, the batch's request and
	// (for skills) its user.
	resolve(sess *groups.Session, req *groups.Request, user json.RawMessage, name string) groups.Resolved
	// refresh reads a tool from KV into the cache: a registration
	// acknowledged through another router may not have reached this one.
	refresh(ctx context.Context, name string) error
}

// continuationPort is the record of parked calls and batches (parked.Store).
type continuationPort interface {
	Park(ctx context.Context, run parked.Run) (parked.Parking, error)
	Settle(ctx context.Context, session, replyID string, results map[string]bus.Result) (*parked.Batch, bool, error)
	Finish(ctx context.Context, b *parked.Batch) error
	Release(b *parked.Batch)
	Get(ctx context.Context, key string) (*parked.Record, error)
	Parked(session, replyID string) []*parked.Record
}

var _ continuationPort = parkedStore{}

// parkedStore is the parked machine's verbs and reads in one value.
type parkedStore struct {
	*parked.Store
	parked.Reads
}

func parkedPort(s *parked.Store) parkedStore { return parkedStore{s, s.Read} }

// runnerPort runs what a call resolved to: a tool through its executor
// (exec.go, durable.go, the ledger), or the skill loader.
type runnerPort interface {
	runTool(ctx context.Context, j *job) bus.Result
	search(ctx context.Context, b *batch, c *callState) bus.Result
	loadSkill(ctx context.Context, session string, user json.RawMessage, c bus.Call, input json.RawMessage) bus.Result
	readOutput(ctx context.Context, session string, c bus.Call, input json.RawMessage) bus.Result
}

// eventPort publishes a session's events through the events stream and
// sends replies.
type eventPort interface {
	// publish sends an event to the events stream, with its id given ("":
	// a new one), and returns at once; stored waits for the stream to hold it.
	publish(id, typ, session, replyID, callID string, trace [2]string, data any) (*sentEvent, error)
	stored(ctx context.Context, evs []*sentEvent) error
	// announce sends an event without asking for an acknowledgement
	// (docs/protocol.md 3.4: a read-only batch's batch.done).
	announce(typ, session, replyID, callID string, trace [2]string, data json.RawMessage) error
	// live sends an event the events stream refuses, for live
	// subscribers only (docs/protocol.md 3.4, call.parked).
	live(typ, session, replyID, callID string, trace [2]string, data any) error
	// reply sends an event from this router to a reply subject (core
	// NATS).
	reply(subject, typ, session, replyID string, trace [2]string, data json.RawMessage) error
}

// outputPort stores the output of a result that would take the batch's
// aggregate messages past the payload limit (outputs.go).
type outputPort interface {
	Fit(ctx context.Context, key string, out []bus.Block, used int, dup bool) ([]bus.Block, error)
}

// pipeline is the batch pipeline with its ports wired. A batch holds the
// pipeline, never the Router.
type pipeline struct {
	sessions sessionPort
	conts    continuationPort
	resolve  resolveStep
	exec     Executor // the executor chain: the guardrails that are on around execStep (chain.go)
	park     parkStep
	report   reportStep
	fit      fitStep
	quota    *quotas     // counts calls that park; nil when off (chain.go)
	audit    *auditTrail // records calls that end outside the chain; nil when off (chain.go)
	log      *slog.Logger
	base     context.Context // the parent of every batch's context (the Router's)
}

// newPipeline wires the batch pipeline from a started Router.
func (r *Router) newPipeline() *pipeline {
	var outputs outputPort
	if r.outputs != nil {
		outputs = r.outputs
	}
	sessions := routerSessions{r.sessions, r.groups}
	return &pipeline{
		sessions: sessions,
		conts:    parkedPort(r.parked),
		resolve:  resolveStep{tools: routerResolver{r}, health: r.store.Health, log: r.log},
		exec:     chain(execStep{runner: routerRunner{r}, sessions: sessions}, r.guards.middlewares()...),
		park:     parkStep{landing: r.life.Landing, conts: parkedPort(r.parked), subj: r.subj, maxParked: r.cfg.Limits.MaxParked, parked: r.m.Parked},
		report:   reportStep{landing: r.life.Landing, audit: r.guards.audit, events: r.events, sessions: sessions, m: r.m, log: r.log},
		fit:      fitStep{outputs: outputs, maxPayload: r.nc.MaxPayload},
		quota:    r.guards.quota,
		audit:    r.guards.audit,
		log:      r.log,
		base:     r.base,
	}
}

// routerSessions is the sessionPort over the session revision cache
// (Snapshot, Revision) and groups.Store (Session, Touch, Reset).
type routerSessions struct {
	*session.Revisions
	*groups.Store
}

// routerResolver is the resolverPort over groups, registry and skills.
type routerResolver struct{ r *Router }

func (x routerResolver) resolve(sess *groups.Session, req *groups.Request, user json.RawMessage, name string) groups.Resolved {
	if t, ok := resolveRead(x.r.cfg.Guard.ReadOutput, req, name); ok {
		return t
	}
	return x.r.skills.resolveName(x.r.groups.View(x.r.reg, sess, req), req, user, name)
}
func (x routerResolver) refresh(ctx context.Context, name string) error {
	return x.r.reg.Refresh(ctx, name)
}

// routerRunner is the runnerPort over the Router's executors.
type routerRunner struct{ r *Router }

func (x routerRunner) runTool(ctx context.Context, j *job) bus.Result {
	if x.r.bg != nil && mayBackground(j) {
		return x.r.bg.run(ctx, j) // a background task (background.go)
	}
	return x.r.tools.runTool(ctx, j)
}

// search runs the built-in search_tools over what the session and its
// user could reach, skills included.
func (x routerRunner) search(ctx context.Context, b *batch, c *callState) bus.Result {
	r := x.r
	sess := r.groups.Session(b.session)
	var docs []groups.SkillDoc
	if loaderShown(b.req) && r.skills != nil {
		gs := r.groups.Groups()
		for _, s := range r.skills.cat.Skills(userOf(b.data.User)) {
			docs = append(docs, groups.SkillDoc{Name: s.Name, Description: s.Description, Groups: skills.GroupsOf(s.Name, gs)})
		}
	}
	text, err := r.groups.View(r.reg, sess, b.req).Search(ctx, b.session, c.input, docs)
	if err != nil {
		return builtinFailed(c.call, err)
	}
	return bus.Result{ID: c.call.ID, Name: c.call.Name, State: bus.StateSuccess, Output: bus.Text(text)}
}

func (x routerRunner) loadSkill(ctx context.Context, session string, user json.RawMessage, c bus.Call, input json.RawMessage) bus.Result {
	return x.r.skills.loadSkill(ctx, session, user, c, input)
}
func (x routerRunner) readOutput(ctx context.Context, session string, c bus.Call, input json.RawMessage) bus.Result {
	ctx, cancel := context.WithTimeout(ctx, outputsBudget)
	defer cancel()
	return readOutput(ctx, x.r.stored.srv, session, c, input)
}
