package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/schemas"
	"github.com/toolbus/toolbus/skills"
	"github.com/toolbus/toolbus/store"
)

// registrar takes workers' registrations and heartbeats on P.register.<tool>,
// P.register.group.<group> and, unless refuseShared, 1.11's P.register
// (docs/protocol.md 7.1, docs/security.md).
type registrar struct {
	*wire
	groups       *groups.Store
	reg          *registry.Registry
	refuseShared bool
	rate         *registry.Rate // bytes of registrations read, per account
	sharedWarned atomic.Int64   // unix ns of the last warning of a refused registration on P.register
	boundWarned  atomic.Int64   // and of one for a worker id bound to another account
	rateWarned   atomic.Int64   // and of one over the rate
}

func (x *registrar) onRegister(m *nats.Msg) {
	// What refuses a registration whatever it holds comes before its decode:
	// the subject, then the account's rate, charged by bytes, for what a
	// registration costs is proportional to them (docs/registry.md).
	name, group, shared, ok := x.subj.Workers.Registration(m.Subject)
	account, err := senderAccount(m)
	switch {
	case !ok:
		err = bus.Errorf(bus.CodeBadEvent, "subject %q names no tool or group to register: a tool registers on %s, a group on %s (docs/protocol.md 7.1)",
			m.Subject, x.subj.Workers.Register("<tool>"), x.subj.Workers.RegisterGroup("<group>"))
	case shared && x.refuseShared:
		x.warnEvery(&x.sharedWarned, "router: refused a registration on the shared subject of protocol 1.11 (--refuse-shared-register): update the worker's SDK to register each tool on P.register.<tool>",
			"subject", m.Subject, "account", account)
		err = bus.Errorf(bus.CodeBadRequest, "this router takes no registrations on %s, the one subject of protocol 1.11: since 1.12 each tool registers on %s and each group on %s (docs/protocol.md 7.1, 14); update the worker's SDK; nothing was registered",
			m.Subject, x.subj.Workers.Register("<tool>"), x.subj.Workers.RegisterGroup("<group>"))
	case err == nil && !x.rate.Take(account, len(m.Data)):
		err = x.overRate(m, account)
	}
	if err != nil {
		x.reject(m, err)
		return
	}
	ctx, cancel := context.WithTimeout(x.base, 10*time.Second)
	defer cancel()
	if group {
		if reason := x.groups.Refusal(ctx, name); reason != "" { // the catalogue's bound (1.25), as after the decode
			x.respond(m, bus.TypeRegisterAck, bus.RegisterAck{Accepted: []string{}, Rejected: []bus.Rejection{{Name: name, Reason: reason}}}, bus.TypeRegisterAck+" reply")
			return
		}
	}
	x.serve(m, "", bus.TypeRegister, bus.TypeRegisterAck, func(e *bus.Event) (any, error) {
		var reg bus.Register
		if err := e.DataAs(&reg); err != nil {
			return nil, err
		}
		if group {
			return x.defineGroup(ctx, name, reg)
		}
		var groupRejects []bus.Rejection
		if shared && !reg.Leaving {
			var err error
			if groupRejects, err = x.putGroups(ctx, reg.Groups); err != nil {
				return nil, err
			}
		}
		on := registry.Shared
		if !shared {
			on = name
		}
		ack, err := x.reg.Register(ctx, on, account, reg)
		ack.Rejected = append(ack.Rejected, groupRejects...)
		if be := (*bus.Error)(nil); errors.As(err, &be) && be.Code == bus.CodeDenied {
			x.warnEvery(&x.boundWarned, "router: refused a registration, beat or leave for a worker id bound to another NATS account (docs/security.md)",
				"subject", m.Subject, "worker", reg.Worker, "account", account)
		}
		return ack, err
	})
}

// overRate is the refusal of m, over account's rate: nothing was read.
func (x *registrar) overRate(m *nats.Msg, account string) error {
	perSec, burst := x.rate.Limits()
	x.warnEvery(&x.rateWarned, "router: refused registrations over a NATS account's rate (router --register-rate, docs/registry.md)",
		"subject", m.Subject, "account", account, "bytes", len(m.Data))
	return bus.Errorf(bus.CodeLimitExceeded, "the registrations of this login (NATS account %q) are past this router's rate of %d bytes a second after a burst of %d: this one, of %d bytes, was not read and nothing was registered; send it again later, as a worker's next beat does (router --register-rate, docs/registry.md)",
		account, perSec, burst, len(m.Data))
}

// senderAccount is the NATS account that sent m as the server says it: a
// message that crossed a service import (a tool runner's account into the
// main one) has a reply the server made, _R_.…, which no client may send,
// and the server's Nats-Request-Info, replacing any the client set. ""
// without the header: the router's own account, or a deployment without
// accounts. The header on any other message is the sender's claim: refused.
func senderAccount(m *nats.Msg) (string, error) {
	info := m.Header.Get(bus.HeaderRequestInfo)
	if info == "" {
		return "", nil
	}
	var ci struct {
		Account string `json:"acc"`
	}
	if !strings.HasPrefix(m.Reply, "_R_.") || json.Unmarshal([]byte(info), &ci) != nil || ci.Account == "" {
		return "", bus.Errorf(bus.CodeBadRequest, "a registration carries %s only as the NATS server sets it, on a request through a service import; nothing was registered (docs/protocol.md 7.1)", bus.HeaderRequestInfo)
	}
	return ci.Account, nil
}

// defineGroup stores a registration's group on P.register.group.<name>, rejecting the rest.
func (x *registrar) defineGroup(ctx context.Context, name string, reg bus.Register) (bus.RegisterAck, error) {
	ack := bus.RegisterAck{Accepted: []string{}, Rejected: []bus.Rejection{}}
	if !bus.ValidID(reg.Worker) {
		return ack, bus.Errorf(bus.CodeBadRequest, "worker id %q must match ^[A-Za-z0-9_-]{1,128}$", reg.Worker)
	}
	if reg.Leaving {
		return ack, nil // a group has no liveness
	}
	keep, rejected := registry.ConfineGroup(name, reg)
	ack.Rejected = append(ack.Rejected, rejected...)
	putRejects, err := x.putGroups(ctx, keep)
	if err != nil {
		return ack, err
	}
	ack.Rejected = append(ack.Rejected, putRejects...)
	if len(keep) > 0 && len(putRejects) == 0 {
		ack.Accepted = append(ack.Accepted, name)
	}
	return ack, nil
}

// putGroups stores gs and returns the rejected ones, or a store's error.
func (x *registrar) putGroups(ctx context.Context, gs []bus.Group) ([]bus.Rejection, error) {
	var rejects []bus.Rejection
	for _, g := range gs {
		if err := x.groups.Register(ctx, g); err != nil {
			var be *bus.Error
			if !errors.As(err, &be) {
				return nil, err
			}
			rejects = append(rejects, bus.Rejection{Name: g.Name, Reason: be.Message})
		}
	}
	return rejects, nil
}

// warnEvery logs msg unless last says it was logged within a minute.
func (x *registrar) warnEvery(last *atomic.Int64, msg string, args ...any) {
	now, then := time.Now().UnixNano(), last.Load()
	if now-then < int64(time.Minute) || !last.CompareAndSwap(then, now) {
		return
	}
	x.log.Warn(msg, args...)
}

// adminVerbs serves P.admin.<verb> (docs/protocol.md 9).
type adminVerbs struct {
	*wire
	id     string
	reg    *registry.Registry
	groups *groups.Store
	parked *parked.Store
	store  *store.Store
	skills *skills.Catalogue
	limits *limits.Limiter // the limits verbs; nil without rules
	// pageBound bounds a page of parked.list in bytes; 0: the server's
	// max payload less parkedPageSlack.
	pageBound int
	// tasksBound is P_tasks' soft bound (nil: tasks are off), for status.
	tasksBound *atomic.Pointer[store.Bound]
	// guardBounds are the quotas' state's and the result cache's (guardrails.bounds).
	guardBounds []store.Named
}

func (x *adminVerbs) onAdmin(m *nats.Msg) {
	verb, _ := strings.CutPrefix(m.Subject, x.subj.Prefix+".admin.")
	x.serve(m, "", bus.TypeAdmin, bus.TypeAdminReply, func(e *bus.Event) (any, error) {
		if e.SessionID != "" && !bus.ValidID(e.SessionID) {
			return nil, bus.Errorf(bus.CodeBadEvent, "sessionid %q is not valid", e.SessionID)
		}
		ctx, cancel := context.WithTimeout(x.base, 10*time.Second)
		defer cancel()
		return x.run(ctx, verb, e)
	})
}

// run runs one verb of docs/protocol.md section 9.
func (x *adminVerbs) run(ctx context.Context, verb string, e *bus.Event) (any, error) {
	switch verb {
	case "tools.delete":
		return deleteNamed(ctx, e, verb, "tool", x.reg.Delete)
	case "groups.delete":
		return deleteNamed(ctx, e, verb, "group", x.groups.Delete)
	case "status":
		return x.status(ctx), nil
	case "skills.list":
		return x.skillsList(), nil
	case "parked.list":
		return x.parkedList(ctx, e)
	case "groups.put":
		g, err := bus.DecodeGroup(e.Data)
		if err != nil {
			return nil, bus.Errorf(bus.CodeBadRequest, "groups.put wants a group definition: %s", strings.TrimPrefix(err.Error(), bus.CodeBadRequest+": "))
		}
		if err := x.groups.Put(ctx, g); err != nil {
			return nil, err
		}
		return map[string]any{"group": g.Name}, nil
	case "limits", "limits.reset":
		return x.limitsVerb(ctx, verb, e)
	case "session.get", "session.delete", "session.activate", "session.mode":
		if e.SessionID == "" {
			return nil, bus.Errorf(bus.CodeBadRequest, "%s needs the sessionid attribute", verb)
		}
		return x.sessionVerb(ctx, verb, e)
	}
	return nil, bus.Errorf(bus.CodeBadRequest, "unknown admin verb %q", verb)
}

// parkedListWait bounds parked.list's wait for the cache to catch up.
const parkedListWait = 2 * time.Second

// sessionView is the reply of session.get.
type sessionView struct {
	Session string          `json:"session"`
	Stored  bool            `json:"stored"`
	Groups  []bus.GroupInfo `json:"groups"`
	State   *groups.Session `json:"state"`
}

// deleteNamed runs a delete verb whose data is {"name": <what's name>}.
func deleteNamed(ctx context.Context, e *bus.Event, verb, what string, del func(context.Context, string) error) (any, error) {
	var d struct {
		Name string `json:"name"`
	}
	if err := e.DataAs(&d); err != nil || !bus.ValidName(d.Name) {
		return nil, bus.Errorf(bus.CodeBadRequest, "%s wants {\"name\": <%s name>}", verb, what)
	}
	if err := del(ctx, d.Name); err != nil {
		return nil, err
	}
	return map[string]any{"deleted": d.Name}, nil
}

// sessionVerb runs the verbs on session e.SessionID.
func (x *adminVerbs) sessionVerb(ctx context.Context, verb string, e *bus.Event) (any, error) {
	var update func(*groups.Session) error
	switch verb {
	case "session.get":
		// From KV: every write acknowledged so far, through any router.
		return x.sessionView(e.SessionID, x.groups.Refresh(ctx, e.SessionID)), nil
	case "session.delete":
		if err := x.groups.DeleteSession(ctx, e.SessionID); err != nil {
			return nil, err
		}
		return map[string]any{"deleted": e.SessionID}, nil
	case "session.activate":
		var d struct {
			Groups []string `json:"groups"`
			Active *bool    `json:"active"`
		}
		if err := e.DataAs(&d); err != nil || len(d.Groups) == 0 {
			return nil, bus.Errorf(bus.CodeBadRequest, "session.activate wants {\"groups\": [names], \"active\": true|false} (active defaults to true)")
		}
		if d.Active == nil {
			d.Active = new(true)
		}
		for _, name := range d.Groups {
			g, ok := x.groups.Group(name)
			if !ok {
				return nil, bus.Errorf(bus.CodeBadRequest, "group %q does not exist", name)
			}
			if g.Scope != bus.ScopeExternal {
				return nil, bus.Errorf(bus.CodeBadRequest, "group %q has scope %s; only external-scope groups are switched by operators (meta groups by reset_tools)", name, g.Scope)
			}
		}
		update = func(s *groups.Session) error {
			s.Active = slices.DeleteFunc(s.Active, func(g string) bool { return slices.Contains(d.Groups, g) })
			if *d.Active {
				s.Active = append(s.Active, d.Groups...)
			}
			return nil
		}
	case "session.mode":
		var d struct {
			Mode string `json:"mode"`
		}
		if err := e.DataAs(&d); err != nil || !permission.ValidMode(d.Mode) {
			return nil, bus.Errorf(bus.CodeBadRequest, "session.mode wants {\"mode\": \"default|accept_edits|explore|bypass|dont_ask\"}")
		}
		update = func(s *groups.Session) error {
			s.Mode = d.Mode
			return nil
		}
	}
	sess, err := x.groups.Update(ctx, e.SessionID, update)
	if err != nil {
		return nil, err
	}
	return x.sessionView(e.SessionID, sess), nil
}

// parkedList lists a page of the calls parked in session e.SessionID (all
// when "") from the cache once it caught up with the bucket
// (parkedListWait); a cache still behind could leave a waiting call out, so
// one session's are then read from the stream leader, and a list of every
// session is refused (docs/inbox.md).
func (x *adminVerbs) parkedList(ctx context.Context, e *bus.Event) (any, error) {
	var q bus.ParkedQuery
	if len(e.Data) > 0 {
		if err := bus.DecodeStrict(e.Data, &q, "parked.list's data", "parked.list"); err != nil {
			return nil, err
		}
	}
	if q.Limit < 0 {
		return nil, bus.Errorf(bus.CodeBadRequest, "parked.list: limit %d: a page holds at least 1 call (absent: as many as fit)", q.Limit)
	}
	after, err := parseParkedCursor(q.After)
	if err != nil {
		return nil, err
	}
	session := e.SessionID
	wctx, cancel := context.WithTimeout(ctx, parkedListWait)
	recs, err := x.parked.Read.ParkedNow(wctx, session)
	cancel()
	if err != nil && session == "" {
		return nil, bus.Errorf(bus.CodeInternal, "parked.list: this router's cache of parked calls is behind the store (%v); ask again, or list one session", err)
	}
	if err != nil {
		x.log.Warn("router: parked.list read from the leader: the cache is behind", "session", session, "err", err)
		if recs, err = x.parked.Read.FromLeader(ctx, session); err != nil {
			return nil, bus.Errorf(bus.CodeInternal, "parked.list: this router's cache of parked calls is behind the store and the store's leader did not answer (%v); ask again", err)
		}
	}
	bound := x.pageBound
	if bound == 0 {
		bound = int(x.nc.MaxPayload()) - parkedPageSlack
	}
	return parkedPage(recs, after, q.Limit, bound, q.OmitThrough), nil
}

// parkedPageSlack is what a page of parked.list leaves of the server's max
// payload to the reply's envelope, headers and next.
const parkedPageSlack = 4 << 10

// parkedCursor is where a page starts: after the call of this creation
// time and key, in the list's order (created, then key).
type parkedCursor struct {
	created time.Time
	key     string
}

// parseParkedCursor reads a next ("" is the start).
func parseParkedCursor(s string) (parkedCursor, error) {
	if s == "" {
		return parkedCursor{}, nil
	}
	at, key, ok := strings.Cut(s, " ")
	created, err := time.Parse(time.RFC3339Nano, at)
	if !ok || err != nil || key == "" {
		return parkedCursor{}, bus.Errorf(bus.CodeBadRequest, "parked.list: after %q is not the next of a page (<created, RFC 3339> <call key>)", s)
	}
	return parkedCursor{created, key}, nil
}

// compare orders rec against c. Its key is built only when the times tie
// (an eager cmp.Or built two keys a comparison: 64% of a poll's CPU at
// 10,000 parked calls, BenchmarkParkedPages10k).
func (c parkedCursor) compare(rec *parked.Record) int {
	if n := rec.Created.Compare(c.created); n != 0 {
		return n
	}
	return strings.Compare(rec.Key(), c.key)
}

// parkedPage is the page of recs after the cursor: at most limit entries
// (0: any number) whose encoding stays under bound bytes. An entry that
// does not fit in what is left is listed without its input
// (input_omitted), and without its context and user if it still does not;
// the page ends where not even that fits, so large inputs or contexts
// cannot push other calls off a page (docs/inbox.md). An entry of revision
// at most omit is listed without them whatever the room: the caller holds them.
func parkedPage(recs []*parked.Record, after parkedCursor, limit, bound int, omit uint64) bus.ParkedPage {
	slices.SortFunc(recs, func(a, b *parked.Record) int {
		if n := a.Created.Compare(b.Created); n != 0 {
			return n
		}
		return strings.Compare(a.Key(), b.Key())
	})
	page := bus.ParkedPage{Parked: []bus.ParkedCall{}}
	size := len(`{"parked":[]}`)
	for _, rec := range recs {
		if !after.created.IsZero() && after.compare(rec) <= 0 {
			continue
		}
		p := parkedEntry(rec)
		if rec.Rev <= omit {
			p.Input, p.Context, p.User, p.InputOmitted = nil, nil, nil, true
		}
		n := encodedLen(p) + 1 // and its comma
		if size+n > bound && len(p.Input) > 0 {
			p.Input, p.InputOmitted = nil, true
			n = encodedLen(p) + 1
		}
		if size+n > bound && len(p.Context)+len(p.User) > 0 {
			// The batch's context and user, which each of its calls
			// carries, may be as large as an input (TestAttackParkedPageLargeContext).
			p.Context, p.User = nil, nil
			n = encodedLen(p) + 1
		}
		if limit > 0 && len(page.Parked) == limit || size+n > bound && len(page.Parked) > 0 {
			page.Next = page.Parked[len(page.Parked)-1].Cursor()
			break
		}
		size += n
		page.Parked = append(page.Parked, p)
	}
	return page
}

// parkedEntry is a parked record as parked.list lists it.
func parkedEntry(rec *parked.Record) bus.ParkedCall {
	return bus.ParkedCall{Session: rec.Session, ReplyID: rec.ReplyID, ID: rec.Call.ID, Name: rec.Call.Name,
		Input: rec.Call.Input, InputDigest: rec.InputDigest, Kind: rec.Kind, Subject: rec.Subject, SuggestedRules: rec.SuggestedRules,
		Reason: rec.Reason, Created: rec.Created, Expires: rec.Expires,
		Revision: rec.Rev, User: rec.User, Context: rec.Context, RequestScoped: rec.RequestScoped}
}

// encodedLen is the length of v's JSON encoding.
func encodedLen(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}

func (x *adminVerbs) sessionView(id string, sess *groups.Session) sessionView {
	return sessionView{Session: id, Stored: sess.Revision() != 0, Groups: x.groups.View(x.reg, sess, nil).Groups(), State: sess}
}

func (x *adminVerbs) status(ctx context.Context) bus.Status {
	live := x.reg.Workers()
	st := bus.Status{Router: x.id, Tools: []bus.ToolStatus{}, Groups: len(x.groups.Groups()),
		Sessions: x.groups.Sessions(), Parked: len(x.parked.Read.Parked("", "")), Store: bus.StoreStatus{State: "ok"}, Warnings: x.groups.Unknown(x.reg)}
	// Stored in KV, not only those decoded here (one record per session).
	if kvs, err := x.store.Sessions.Status(ctx); err == nil {
		st.SessionsStored = new(int(kvs.Values()))
	}
	if full, why, since := x.store.Health.Full(); full {
		st.Store = bus.StoreStatus{State: "full", Error: why, Since: &since}
	}
	st.Store.Bounds = x.store.Bounds(ctx, x.tasksBound.Load(), x.guardBounds...)
	for _, t := range x.reg.Tools() {
		g := t.Def.Groups
		if len(g) == 0 {
			g = []string{bus.GroupBasic} // where a tool without groups is (docs/protocol.md 7.2)
		}
		st.Tools = append(st.Tools, bus.ToolStatus{Name: t.Def.Name, LiveWorkers: len(live[t.Def.Name]), External: t.Def.External, Groups: g})
	}
	// Each tool's first ids, as many as fit the reply: a worker login may
	// beat under any number of ids of 128 bytes for each name it registers
	// (TestAttackStatusWorkerIDs).
	room := int(x.nc.MaxPayload()) - parkedPageSlack - encodedLen(st)
	for i, t := range st.Tools {
		ids := live[t.Name]
		n, cost := 0, len(`,"workers":[]`)
		for ; n < min(len(ids), bus.StatusWorkers) && room >= cost+len(ids[n])+3; n++ {
			room -= cost + len(ids[n]) + 3 // "id",
			cost = 0
		}
		st.Tools[i].Workers = ids[:n]
	}
	return st
}

// limitsVerb runs limits and limits.reset (docs/protocol.md 9).
func (x *adminVerbs) limitsVerb(ctx context.Context, verb string, e *bus.Event) (any, error) {
	var q struct {
		Rule    string `json:"rule,omitempty"`
		Tool    string `json:"tool,omitempty"`
		User    string `json:"user,omitempty"`
		Session string `json:"session,omitempty"`
	}
	if len(e.Data) > 0 {
		dec := json.NewDecoder(bytes.NewReader(e.Data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&q); err != nil {
			return nil, bus.Errorf(bus.CodeBadRequest, "%s wants {\"rule\", \"tool\", \"user\", \"session\"} (all optional): %v", verb, err)
		}
	}
	if x.limits == nil {
		return map[string]any{"limits": []limits.Usage{}}, nil
	}
	call := limits.Call{Tool: q.Tool, User: q.User, Session: q.Session}
	if t, ok := x.reg.Lookup(q.Tool); ok {
		call.ReadOnly = t.Def.ReadOnly // write-only rules do not count a read
	}
	if verb == "limits.reset" {
		n, err := x.limits.Reset(ctx, q.Rule, call)
		if err != nil {
			return nil, bus.Errorf(bus.CodeBadRequest, "%v", err)
		}
		return map[string]any{"reset": n}, nil
	}
	us, err := x.limits.Usage(ctx, call)
	return map[string]any{"limits": us}, err
}

// toolsLister answers P.tools.<session> (docs/protocol.md 4.1).
type toolsLister struct {
	*wire
	reg     *registry.Registry
	groups  *groups.Store
	skills  *routerSkills
	ids     Identities  // binds sessions to users (Config.Identities; nil: open)
	audit   *auditTrail // records a refused query; nil when off
	readOut bool        // read_output is offered (Guard.ReadOutput)
}

func (r *toolsLister) onTools(m *nats.Msg) {
	e, err := r.decode(m, "tools", bus.TypeToolsQuery)
	var q bus.ToolsQuery
	if err == nil && len(e.Data) > 0 {
		err = e.DataAs(&q)
	}
	if err == nil {
		q.User, err = identify(r.ids, e.SessionID, q.User)
	}
	var list *bus.ToolsList
	if err == nil {
		list, err = r.list(e.SessionID, q)
	}
	if err != nil {
		r.audit.refusedRequest(r.base, r.subj, m.Subject, "tools", e, err)
	}
	r.answer(m, bus.TypeToolsList, list, err)
}

// list builds the tool list a session's model sees.
func (r *toolsLister) list(session string, q bus.ToolsQuery) (*bus.ToolsList, error) {
	req, err := groups.CheckRequest(q.Request)
	if err != nil {
		return nil, err
	}
	// From KV: a turn must see an activation made through any router.
	ctx, cancel := context.WithTimeout(r.base, 5*time.Second)
	defer cancel()
	view := r.groups.View(r.reg, r.groups.Refresh(ctx, session), req)
	defs, prompt := r.skills.listing(view, req, userOf(q.User), withReadOutput(r.readOut, req, view.Tools()))
	var (
		tools    []json.RawMessage
		deferred map[string]string
	)
	if q.Deferred {
		var ns []schemas.Namespace
		ns, deferred = view.Deferred()
		// The provider's tool search stands in for search_tools (protocol 4.1).
		defs = slices.DeleteFunc(defs, func(d bus.ToolDef) bool { return d.Name == groups.SearchTools })
		tools, err = schemas.ExportDeferred(q.Format, defs, ns)
	} else {
		tools, err = schemas.Export(q.Format, defs)
	}
	if err != nil {
		return nil, bus.Errorf(bus.CodeBadRequest, "%v", err)
	}
	return &bus.ToolsList{Tools: tools, Groups: view.Groups(), SkillsPrompt: prompt, SessionRev: view.Session().Revision(), Deferred: deferred}, nil
}
