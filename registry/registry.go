// Package registry keeps tool definitions (P_tools) and worker liveness
// (P_workers) in KV behind a watch-fed cache, and decides on registrations
// (docs/registry.md).
package registry

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/held"
	"github.com/toolbus/toolbus/rcache"
	"github.com/toolbus/toolbus/schemas"
	"github.com/toolbus/toolbus/store"
)

// Tool is a registered definition with its compiled input schema.
type Tool struct {
	Def    bus.ToolDef
	Schema *schemas.Schema
	order  int64 // when the tool was first registered (unix ns), kept across updates
	rev    uint64
}

// Config configures a Registry.
type Config struct {
	// Heartbeat is the workers' (live for three of them); zero: bus.DefaultHeartbeat.
	Heartbeat time.Duration
	// Logger receives warnings about bad entries; nil discards.
	Logger *slog.Logger
	// Now returns the current time; nil means time.Now, and liveness then
	// leaves out the time this router was held (internal/held).
	Now func() time.Time
}

// Registry is one deployment's tools (catalog) and workers (liveness) behind one
// handle, and decides registrations; concurrency-safe.
type Registry struct {
	*catalog
	*liveness

	cfg     Config
	version atomic.Uint64 // bumped on every change of either part
	watches []*store.Watch

	workConsumer func(ctx context.Context, tool string) error // makes a durable tool's work consumer
	consumers    sync.Map                                     // durable tools whose consumer exists
	probes       probes                                       // Refresh's probes, one per tool at a time
	started      time.Time                                    // when Start had the initial values
	clock        *held.Clock                                  // liveness's; nil with Config.Now
}

// New returns a Registry over the store's buckets; call Start before use.
func New(st *store.Store, cfg Config) *Registry {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = bus.DefaultHeartbeat
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	r := &Registry{cfg: cfg, workConsumer: st.WorkConsumer}
	now := cfg.Now
	if now == nil {
		r.cfg.Now = time.Now
		r.clock = held.New(time.Now, cfg.Heartbeat/10)
		now = r.clock.Now
	}
	r.catalog = newCatalog(st.Tools, cfg.Logger, &r.version)
	r.liveness = &liveness{kv: st.Workers, heartbeat: cfg.Heartbeat, now: now, health: st.Health, version: &r.version,
		beats: map[string]map[string]beat{}}
	return r
}

// Start watches both buckets, returning once loaded or ctx ends.
func (r *Registry) Start(ctx context.Context) error {
	tw, err := store.WatchLoaded(ctx, r.catalog.kv, ">", r.applyTool)
	if err != nil {
		return err
	}
	ww, err := store.WatchLoaded(ctx, r.liveness.kv, ">", r.applyWorker)
	if err != nil {
		_ = tw.Stop(context.WithoutCancel(ctx))
		return err
	}
	r.watches = []*store.Watch{tw, ww}
	r.started = r.cfg.Now()
	if r.clock != nil {
		r.clock.Start(ctx)
	}
	return nil
}

// Stop ends Refresh's probes (cancelled once ctx ends: none runs after
// Stop), the watches and the clock, waiting for them until ctx ends; safe
// twice. A Refresh after it gets an error.
func (r *Registry) Stop(ctx context.Context) error {
	return cmp.Or(r.probes.stop(ctx), r.clock.Stop(ctx), store.StopAll(ctx, r.watches...))
}

// Version changes whenever the cache does, for what was derived from it.
func (r *Registry) Version() uint64 { return r.version.Load() }

// Refresh reads tool name, and its workers when none is live, from KV: a
// registration acknowledged elsewhere may not have reached the watch yet.
func (r *Registry) Refresh(ctx context.Context, name string) error {
	e, err := r.catalog.kv.Get(ctx, name)
	if store.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	r.applyTool(e)
	t, ok := r.Lookup(name)
	if !ok || r.Live(t) {
		return nil
	}
	if err := r.probes.do(ctx, name, func(ctx context.Context) error { return r.liveness.probe(ctx, name) }); err != nil {
		return err
	}
	r.awaitFirstBeat(ctx, t)
	return nil
}

// awaitFirstBeat waits, within two heartbeats of Start, for a worker of t to
// beat: after an outage the bucket's beats have expired (docs/registry.md).
func (r *Registry) awaitFirstBeat(ctx context.Context, t *Tool) {
	until := r.started.Add(2 * r.cfg.Heartbeat)
	if r.Live(t) || !r.cfg.Now().Before(until) {
		return
	}
	tick := time.NewTicker(max(r.cfg.Heartbeat/20, time.Millisecond))
	defer tick.Stop()
	for !r.Live(t) && r.cfg.Now().Before(until) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// Register applies a registration or heartbeat that came on P.register.<on>
// (Confine) or on Shared (docs/protocol.md 7.1) from NATS account account
// ("": the router's own, or a deployment without accounts): changed
// definitions stored by compare-and-set, then liveness. A worker id's keys
// are bound to the account that stored them first: from another, the whole
// registration is refused denied (bound), nothing changed. KV errors are
// returned, rejections are in the ack; groups are the caller's.
func (r *Registry) Register(ctx context.Context, on, account string, reg bus.Register) (bus.RegisterAck, error) {
	ack := bus.RegisterAck{Accepted: []string{}, Rejected: []bus.Rejection{}}
	if !bus.ValidID(reg.Worker) {
		return ack, bus.Errorf(bus.CodeBadRequest, "worker id %q must match ^[A-Za-z0-9_-]{1,128}$", reg.Worker)
	}
	if on != Shared {
		if !bus.ValidName(on) {
			return ack, bus.Errorf(bus.CodeBadRequest, "tool name %q must match ^[A-Za-z0-9_-]{1,64}$", on)
		}
		var rejected []bus.Rejection
		reg, rejected = Confine(on, reg)
		ack.Rejected = append(ack.Rejected, rejected...)
	}
	if reg.Leaving {
		return ack, r.leave(ctx, reg.Worker, account, on)
	}
	rd, done := r.read(reg.Worker, account, r.repeated(reg))
	defer done()
	if rd.refused != nil {
		return ack, rd.refused
	}
	ack.Rejected = append(ack.Rejected, reg.Refused...)
	seen := map[string]bool{}
	for _, d := range reg.Tools {
		d.Defaults()
		if seen[d.Name] {
			ack.Rejected = append(ack.Rejected, bus.Rejection{Name: d.Name, Reason: "defined twice in one registration"})
			continue
		}
		seen[d.Name] = true
		reason, err := r.store(ctx, reg.Worker, account, d)
		if err != nil {
			return ack, err
		}
		if reason != "" {
			ack.Rejected = append(ack.Rejected, bus.Rejection{Name: d.Name, Reason: reason})
			continue
		}
		ack.Accepted = append(ack.Accepted, d.Name)
	}
	for _, name := range ack.Accepted {
		d, _ := r.Lookup(name)
		if d != nil && d.Def.External {
			continue
		}
		if _, made := r.consumers.Load(name); d != nil && d.Def.Durable && !made {
			// Once per router process (CreateOrUpdate is idempotent).
			if err := r.workConsumer(ctx, name); err != nil {
				return ack, err
			}
			r.consumers.Store(name, true)
		}
		if err := r.record(ctx, name, beatOf(reg, name), rd); err != nil {
			return ack, err
		}
	}
	return ack, nil
}

// repeated returns each tool's beat when reg repeats the cached definition.
func (r *Registry) repeated(reg bus.Register) map[string]*bus.WorkerBeat {
	out := make(map[string]*bus.WorkerBeat, len(reg.Tools))
	for i := range reg.Tools {
		d := &reg.Tools[i]
		if _, seen := out[d.Name]; seen {
			continue
		}
		out[d.Name] = nil
		if t, ok := r.Lookup(d.Name); ok && !t.Def.External && t.Def.Equal(d) {
			out[d.Name] = new(beatOf(reg, d.Name))
		}
	}
	return out
}

// beatOf is reg's P_workers value for tool.
func beatOf(reg bus.Register, tool string) bus.WorkerBeat {
	bv := bus.WorkerBeat{Binary: reg.BinaryExec, Compact: reg.BinaryExec && reg.CompactExec}
	if reg.InFlight != nil { // the worker reports its calls in flight
		bv.InFlight = reg.InFlight[tool]
		if bv.InFlight == nil {
			bv.InFlight = []string{}
		}
	}
	return bv
}

// MaxDefinition bounds a tool definition's JSON encoding (bus.MaxDefinition).
const MaxDefinition = bus.MaxDefinition

// Check returns why d cannot be registered ("": it can), compiling its schema.
func Check(d *bus.ToolDef) (string, *schemas.Schema) {
	if !bus.ValidName(d.Name) {
		return fmt.Sprintf("name %q must match ^[A-Za-z0-9_-]{1,64}$", d.Name), nil
	}
	if bus.RouterTool(d.Name) {
		return fmt.Sprintf("name %q is a tool the router lists itself (docs/protocol.md 7.1)", d.Name), nil
	}
	for _, g := range d.Groups {
		if !bus.ValidName(g) {
			return fmt.Sprintf("group name %q must match ^[A-Za-z0-9_-]{1,64}$", g), nil
		}
	}
	switch d.Permission {
	case bus.PermissionPassthrough, bus.PermissionAllow, bus.PermissionAsk:
	default:
		return fmt.Sprintf("permission %q must be passthrough, allow or ask", d.Permission), nil
	}
	switch d.RuleMatcher {
	case bus.MatcherNone, bus.MatcherCommand, bus.MatcherPath:
	default:
		return fmt.Sprintf("rule_matcher %q must be none, command or path", d.RuleMatcher), nil
	}
	if d.RuleMatcher != bus.MatcherNone && d.RuleField == "" {
		return "rule_field is required with rule_matcher " + d.RuleMatcher, nil
	}
	if d.PathBase != "" && (!filepath.IsAbs(d.PathBase) || filepath.Clean(d.PathBase) != d.PathBase) {
		return fmt.Sprintf("path_base %q must be a clean absolute path", d.PathBase), nil
	}
	if reason := rcache.CheckDef(d); reason != "" {
		return reason, nil
	}
	if d.Background && d.NoBackground {
		return "background and no_background contradict each other: a tool either goes on in the background past its timeout or never does", nil
	}
	if d.Durable && d.External {
		return "an external tool cannot be durable: its calls already wait, durably, for their handler", nil
	}
	if len(d.InputSchema) == 0 || string(d.InputSchema) == "null" {
		return "input_schema is missing", nil
	}
	if b, err := json.Marshal(d); err == nil && len(b) > MaxDefinition {
		return fmt.Sprintf("the definition is %d bytes encoded, more than %d: every session may list it, and a listing is one message (docs/protocol.md 7.1)", len(b), MaxDefinition), nil
	}
	s, err := schemas.Compile(d.InputSchema)
	if err != nil {
		return "input_schema: " + strings.TrimPrefix(err.Error(), "schemas: "), nil
	}
	if len(d.OutputSchema) > 0 && string(d.OutputSchema) != "null" {
		if _, err := schemas.Compile(d.OutputSchema); err != nil {
			return "output_schema: " + strings.TrimPrefix(err.Error(), "schemas: "), nil
		}
	}
	return "", s
}

// store writes d unless invalid or in conflict: a rejection reason or KV's error.
// A built-in name is exempt from the bound on new names from account "" only
// (the routers' own logins; Builtins).
func (r *Registry) store(ctx context.Context, worker, account string, d bus.ToolDef) (string, error) {
	reason, s := Check(&d)
	if reason != "" {
		return reason, nil
	}
	if t, ok := r.Lookup(d.Name); ok && t.Def.Equal(&d) {
		return "", nil // a heartbeat: nothing changed
	}
	var (
		registered int64
		same       *Tool
		taken      bool // a new name, admitted by the catalogue's bound
	)
	defer func() {
		if taken {
			r.names.Done()
		}
	}()
	rev, err := store.Update(ctx, r.catalog.kv, d.Name, store.Bounded, func(entry jetstream.KeyValueEntry) ([]byte, error) {
		reason, same, registered = "", nil, time.Now().UnixNano()
		if entry == nil && !taken && (account != "" || !slices.Contains(Builtins, d.Name)) { // a name the catalogue does not hold (protocol 7.1, 1.25)
			if reason, taken = r.names.Take(r.tools.Len()); !taken {
				return nil, store.ErrNoChange
			}
		}
		if entry != nil {
			if cur, perr := parseTool(entry.Value()); perr == nil {
				if cur.Def.Equal(&d) {
					same = cur
					return nil, store.ErrNoChange
				}
				conflict := !cur.Def.External && r.liveExcept(d.Name, worker)
				if conflict {
					reason = fmt.Sprintf("conflicts with a different live definition of %q (they differ in %s); "+
						"it is served only where it was accepted, until no worker with the other definition is live", d.Name, strings.Join(defDiff(&cur.Def, &d), ", "))
					return nil, store.ErrNoChange
				}
				if cur.order != 0 {
					registered = cur.order
				}
			}
		}
		return encodeRecord(&d, registered)
	})
	switch {
	case store.IsMaxMsgs(err) && r.names != nil:
		return r.names.Full(), nil
	case err != nil:
		return "", fmt.Errorf("registry: put %s: %w", d.Name, err)
	case reason != "":
		return reason, nil
	case same != nil:
		registered = same.order
	}
	r.put(&Tool{Def: d, Schema: s, rev: rev, order: registered})
	return "", nil
}

// Builtins are the names of the routers' own tools (package builtin, both
// name profiles, and the background tasks' tools): compiled in, a fixed
// count, exempt from the catalogue's bound on new names when registered from
// the main account (a router's built-in worker logs in as the router; a
// worker's login is in a runner account: docs/security.md "Accounts"), with
// room of their own in its stream's max_msgs (store.BuiltinRoom), so no
// worker's flood of names keeps a router's new built-ins out, and no worker
// takes that room with them.
var Builtins = []string{"get_current_time", "echo", "todo_write", "task_output", "wait_async_results", "ToolStop", "list_tasks",
	"read_file", "write_file", "edit_file", "list_files", "search_files", "shell", "Read", "Write", "Edit", "Glob", "Grep", "Bash"}

// defDiff names the differing members of two definitions, for rejections.
func defDiff(a, b *bus.ToolDef) []string {
	var ma, mb map[string]json.RawMessage
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	_ = json.Unmarshal(ja, &ma)
	_ = json.Unmarshal(jb, &mb)
	var diff []string
	for k, v := range ma {
		if w, ok := mb[k]; !ok || !bytes.Equal(v, w) {
			diff = append(diff, k)
		}
		delete(mb, k)
	}
	diff = slices.AppendSeq(diff, maps.Keys(mb)) // members of b alone
	slices.Sort(diff)
	if len(diff) == 0 {
		diff = []string{"nothing encoded"}
	}
	return diff
}

// catalog is P_tools' watch-fed cache in registration order, and the admin delete.
type catalog struct {
	kv    jetstream.KeyValue
	log   *slog.Logger
	tools *store.Ordered[*Tool] // bumps the Registry's version on every change
	names *store.Count          // the bound on new names (nil: none)
}

func newCatalog(kv jetstream.KeyValue, log *slog.Logger, version *atomic.Uint64) *catalog {
	return &catalog{kv: kv, log: log, names: store.CountOf(kv), tools: store.NewOrdered(kv, func(t *Tool) int64 { return t.order },
		func([]*Tool) { version.Add(1) })}
}

func (c *catalog) applyTool(e jetstream.KeyValueEntry) {
	err := c.tools.Apply(e, func(val []byte) (*Tool, bool, error) {
		t, err := parseTool(val)
		if err == nil {
			t.rev = e.Revision()
		}
		return t, err == nil, err
	})
	if err != nil {
		c.log.Warn("registry: ignoring bad tool entry", "tool", e.Key(), "err", err)
	}
}

// put caches t, unless a newer revision of it, or its delete, is cached.
func (c *catalog) put(t *Tool) { c.tools.Put(t.Def.Name, t.rev, t) }

// A P_tools value is the definition with "registered" (unix ns), the list's order.
const registeredKey = `"registered"`

// encodeRecord returns the stored value of d.
func encodeRecord(d *bus.ToolDef, registered int64) ([]byte, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(b[:len(b)-1], `,%s:%d}`, registeredKey, registered), nil
}

func parseTool(b []byte) (*Tool, error) {
	var d bus.ToolDef
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	var meta struct {
		Registered int64 `json:"registered"`
	}
	_ = json.Unmarshal(b, &meta)
	if len(d.InputSchema) == 0 || string(d.InputSchema) == "null" {
		d.InputSchema = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	s, err := schemas.Compile(d.InputSchema)
	if err != nil {
		return nil, err
	}
	return &Tool{Def: d, Schema: s, order: meta.Registered}, nil
}

// Lookup returns the tool named name, live or not.
func (c *catalog) Lookup(name string) (*Tool, bool) { return c.tools.Get(name) }

// Tools returns every registered tool in the order it was first registered.
func (c *catalog) Tools() []*Tool { return slices.Clone(c.tools.List()) }

// Delete removes a tool definition (the admin verb tools.delete).
func (c *catalog) Delete(ctx context.Context, name string) error {
	if err := c.tools.Delete(ctx, name); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	return store.CountOf(c.kv).Marked(ctx) // the marker's room in max_msgs
}

// liveness is one beat per <tool>.<worker> by the local clock, fed by the
// watch, own writes and probes (docs/registry.md).
type liveness struct {
	kv        jetstream.KeyValue
	heartbeat time.Duration
	now       func() time.Time
	health    *store.Health  // where liveness writes note a full store
	version   *atomic.Uint64 // the Registry's, bumped on every change

	mu      sync.RWMutex
	beats   map[string]map[string]beat // tool → worker → last beat
	until   liveUntil                  // what a call reads of beats: set with them, under mu and its own lock
	trouble time.Time                  // when a liveness write last failed
	order   readOrder                  // the registrations and leaves read, in order (order.go)
	swept   time.Time                  // when keep last dropped the beats long unseen
}

// liveUntil is, per tool, until when a worker of each exec form is live
// (its newest beat that is no leave, plus three heartbeats; zero: none),
// set on every change of its beats: Live and ExecForm, twice a call, read
// one entry, under a lock of its own, instead of every worker's beat.
type liveUntil struct {
	mu sync.RWMutex
	m  map[string]*[bus.ExecCompact + 1]time.Time
}

// set summarises ws, tool's beats, live for span; none: the tool is dropped.
func (u *liveUntil) set(tool string, ws map[string]beat, span time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(ws) == 0 {
		delete(u.m, tool)
		return
	}
	f := new([bus.ExecCompact + 1]time.Time) // never changed once set: read after the lock
	for _, b := range ws {
		if i := min(b.form, bus.ExecCompact); !b.left && b.at.Add(span).After(f[i]) {
			f[i] = b.at.Add(span)
		}
	}
	if u.m == nil {
		u.m = map[string]*[bus.ExecCompact + 1]time.Time{}
	}
	u.m[tool] = f
}

// least is the least exec form a live worker of tool reads at now, and
// whether one is live.
func (u *liveUntil) least(tool string, now time.Time) (bus.ExecForm, bool) {
	u.mu.RLock()
	f := u.m[tool]
	u.mu.RUnlock()
	if f != nil {
		for i := range f {
			if !f[i].IsZero() && f[i].After(now) {
				return bus.ExecForm(i), true
			}
		}
	}
	return bus.ExecStructured, false
}

// beat is what a router knows of one worker serving one tool.
type beat struct {
	at       time.Time // local time the beat was seen: no clock is compared with the server's
	rev      uint64
	left     bool         // the worker said it is leaving
	inflight []string     // calls of the tool the worker was running (bus.CallKey); nil: it does not say
	form     bus.ExecForm // the exec form the worker reads (docs/protocol.md 5.1)
	read     uint64       // the registration (readOrder) that counted it on this router; 0: the watch
	account  string       // the NATS account its key is bound to (protocol 7.1, 1.20)
}

// cutoff is the oldest beat that still makes a worker live.
func (l *liveness) cutoff() time.Time { return l.now().Add(-3 * l.heartbeat) }

// live says whether the beat makes its worker live at cutoff.
func (b beat) live(cutoff time.Time) bool { return !b.left && b.at.After(cutoff) }

func (l *liveness) applyWorker(e jetstream.KeyValueEntry) {
	tool, worker, ok := strings.Cut(e.Key(), ".")
	if !ok {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		l.setBeat(tool, worker, beat{rev: e.Revision()}, true)
		return
	}
	v := decodeStored(e.Value())
	l.setBeat(tool, worker, beat{at: l.now(), rev: e.Revision(), left: v.Left, inflight: v.InFlight, form: v.Form(), account: v.Account}, false)
}

// Troubled reports whether a liveness write failed within four heartbeats:
// missed beats may never have been stored, so nobody is declared gone.
func (l *liveness) Troubled() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return !l.trouble.IsZero() && l.now().Sub(l.trouble) < 4*l.heartbeat
}

// MayHold reports whether a live worker of tool may be running call key.
func (l *liveness) MayHold(tool, key string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	cutoff := l.cutoff()
	for _, b := range l.beats[tool] {
		if b.live(cutoff) && (b.inflight == nil || slices.Contains(b.inflight, key)) {
			return true
		}
	}
	return false
}

// ExecForm is the exec form every live worker of tool reads (docs/protocol.md 5.1):
// the least any declared; structured when none is live.
func (l *liveness) ExecForm(tool string) bus.ExecForm {
	form, _ := l.until.least(tool, l.now())
	return form
}

// read counts worker's beats as soon as read (nil: only once stored), unless
// it left; it returns what record needs (refused, and nothing counted, when
// a key of worker's is bound to another account) and done, called once applied.
func (l *liveness) read(worker, account string, beats map[string]*bus.WorkerBeat) (*reading, func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for tool := range beats {
		if l.beats[tool][worker].elsewhere(account, l.cutoff()) {
			return &reading{refused: bound(tool, worker)}, func() {}
		}
	}
	rd := &reading{worker: worker, account: account, seen: make(map[string]seenBeat, len(beats))}
	l.order.opened(rd)
	now := l.now()
	for tool, bv := range beats {
		leftBefore := l.order.leftAfter(tool, worker, 0)
		b, ok := l.beats[tool][worker]
		rd.seen[tool] = seenBeat{rev: b.revFor(account), left: b.left || leftBefore}
		if bv == nil || (ok && b.left) || leftBefore || ok && b.account != account {
			continue
		}
		b.at, b.inflight, b.form, b.read, b.account = now, bv.InFlight, bv.Form(), rd.seq, account
		l.keep(tool, worker, b)
	}
	return rd, func() {
		l.mu.Lock()
		l.order.closed(rd.seq)
		l.mu.Unlock()
	}
}

// record stores one beat of rd's worker for tool; a refused beat still counts here
// (docs/registry.md), and one read before a leave is dropped (compare-and-set).
func (l *liveness) record(ctx context.Context, tool string, bv bus.WorkerBeat, rd *reading) error {
	worker := rd.worker
	l.mu.RLock()
	overtaken := rd.overtaken(l, tool)
	l.mu.RUnlock()
	if overtaken {
		return nil
	}
	key := tool + "." + worker
	rev, err := rd.seen[tool].rev, error(nil)
	for range beatAttempts {
		if rev, err = putBeat(ctx, l.kv, key, encodeStored(bv, rd.account), rev, rd.account); !errors.Is(err, errBeaten) {
			break
		}
		l.mu.RLock()
		later := l.beats[tool][worker].read > rd.seq
		l.mu.RUnlock()
		if later {
			return nil // a beat read later is stored, or on its way: it says more
		}
	}
	switch {
	case errors.Is(err, errLeft):
		l.setBeat(tool, worker, beat{at: l.now(), rev: rev, left: true, account: rd.account}, false)
		return nil
	case errors.Is(err, errBound):
		return bound(tool, worker)
	}
	full := l.health.Note(err)
	if err != nil {
		// Seen here, so live here: a refusing store must not kill every tool.
		l.mu.Lock()
		l.trouble = l.now()
		l.mu.Unlock()
		l.sawBeat(tool, worker, bv.InFlight, bv.Form(), rd)
		if full {
			return nil // the worker is live; the router reports the store full (status)
		}
		return fmt.Errorf("registry: liveness %s: %w", key, err)
	}
	l.setBeat(tool, worker, beat{at: l.now(), rev: rev, inflight: bv.InFlight, form: bv.Form(), read: rd.seq, account: rd.account}, false)
	return nil
}

// sawBeat records a beat taken but not stored, unless rd was overtaken.
func (l *liveness) sawBeat(tool, worker string, inflight []string, form bus.ExecForm, rd *reading) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.beats[tool][worker]
	if rd != nil && (rd.overtaken(l, tool) || b.read > rd.seq || b.elsewhere(rd.account, l.cutoff())) {
		return
	}
	if rd != nil {
		b.account = rd.account
	}
	b.at, b.left, b.inflight, b.form = l.now(), false, inflight, form
	l.keep(tool, worker, b)
}

// setBeat records b unless a newer revision is known; remove drops it.
func (l *liveness) setBeat(tool, worker string, b beat, remove bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.beats[tool]
	if old, ok := m[worker]; ok && old.rev >= b.rev {
		return
	}
	if l.order.leaving(tool, worker) {
		// A beat stored before the leave: the leave is on its way.
		b.left = true
	}
	if old, ok := m[worker]; ok && !b.left && !remove && !old.left && old.read > b.read &&
		(b.read != 0 || l.order.open[old.read] != nil) {
		// A beat read later counts already and is newer.
		b.at, b.inflight, b.form, b.read = old.at, old.inflight, old.form, old.read
	}
	if remove {
		l.version.Add(1)
		delete(m, worker)
		if len(m) == 0 {
			delete(l.beats, tool)
		}
		l.until.set(tool, m, 3*l.heartbeat)
		return
	}
	l.keep(tool, worker, b)
}

// keep records b as worker's beat for tool; the caller holds l.mu. At
// most once a heartbeat it first drops every beat seen no more for six
// heartbeats, twice P_workers' TTL: its key expired, and an expiry reaches
// no watch, so nothing else would (a worker may register under any number
// of ids, each with its calls in flight; TestAttackStaleBeatsKept).
func (l *liveness) keep(tool, worker string, b beat) {
	if now := l.now(); now.Sub(l.swept) >= l.heartbeat {
		l.swept = now
		for t, m := range l.beats {
			n := len(m)
			maps.DeleteFunc(m, func(_ string, b beat) bool { return b.at.Before(now.Add(-6 * l.heartbeat)) })
			if len(m) < n {
				if len(m) == 0 {
					delete(l.beats, t)
				}
				l.until.set(t, m, 3*l.heartbeat)
			}
		}
	}
	m := l.beats[tool]
	if m == nil {
		m = map[string]beat{}
		l.beats[tool] = m
	}
	m[worker] = b
	l.until.set(tool, m, 3*l.heartbeat)
	l.version.Add(1)
}

// Live reports whether t is external or a worker beat within three heartbeats.
func (l *liveness) Live(t *Tool) bool {
	if t.Def.External {
		return true
	}
	_, live := l.until.least(t.Def.Name, l.now())
	return live
}

// liveExcept reports whether a worker but except beat for tool lately.
func (l *liveness) liveExcept(tool, except string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	cutoff := l.cutoff()
	for w, b := range l.beats[tool] {
		if w != except && b.live(cutoff) {
			return true
		}
	}
	return false
}

// Workers returns the ids of the live workers per tool, sorted: those of
// the beats in P_workers, whichever SDK beats (the status verb's workers).
func (l *liveness) Workers() map[string][]string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	cutoff := l.cutoff()
	out := map[string][]string{}
	for tool, ws := range l.beats {
		for w, b := range ws {
			if b.live(cutoff) {
				out[tool] = append(out[tool], w)
			}
		}
		slices.Sort(out[tool])
	}
	return out
}

// leave marks a worker gone in the cache and KV ("left", not deleted: a
// late older beat must not revive it); only, when set, confines it to that
// tool, written even before its beat was seen here. bound when a key of
// worker's is bound to another account than account, nothing changed.
func (l *liveness) leave(ctx context.Context, worker, account, only string) error {
	l.mu.Lock()
	var tools []string
	if only != "" {
		tools = []string{only}
	}
	for tool, ws := range l.beats {
		if _, ok := ws[worker]; ok && only == "" {
			tools = append(tools, tool)
		}
	}
	for _, tool := range l.order.reading(worker) {
		if !slices.Contains(tools, tool) && only == "" {
			tools = append(tools, tool)
		}
	}
	revs := make([]uint64, len(tools)) // the revisions checked: each write is compare-and-set on its own
	for i, tool := range tools {
		b := l.beats[tool][worker]
		if b.elsewhere(account, l.cutoff()) {
			l.mu.Unlock()
			return bound(tool, worker)
		}
		revs[i] = b.revFor(account)
	}
	seq := l.order.leave(worker, tools)
	for _, tool := range tools {
		if b, ok := l.beats[tool][worker]; ok && b.account == account {
			b.left = true
			l.keep(tool, worker, b)
		}
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.order.landed(worker, tools, seq)
		l.mu.Unlock()
	}()
	left := encodeStored(bus.WorkerBeat{Left: true}, account)
	for i, tool := range tools {
		rev, err := revs[i], errBeaten
		for n := 0; errors.Is(err, errBeaten) && n < beatAttempts; n++ {
			rev, err = putBeat(ctx, l.kv, beatKey(tool, worker), left, rev, account)
		}
		switch {
		case errors.Is(err, errBound):
			return bound(tool, worker)
		case err != nil && !errors.Is(err, errLeft):
			return fmt.Errorf("registry: leave %s.%s: %w", tool, worker, err)
		}
		l.setBeat(tool, worker, beat{at: l.now(), rev: rev, left: true, account: account}, false)
	}
	return nil
}

// probe reads tool's beats from KV, for a call finding no live worker.
func (l *liveness) probe(ctx context.Context, tool string) error {
	if kv, ok := l.kv.(leaderLister); ok {
		// A key listing is an ephemeral consumer, which may sit on a
		// follower that lacks a beat stored a moment ago (docs/registry.md).
		entries, err := kv.Latest(ctx, tool+".*")
		for _, e := range entries {
			l.applyWorker(e)
		}
		return err
	}
	keys, err := l.kv.ListKeysFiltered(ctx, tool+".*")
	if err != nil {
		return err
	}
	for key := range keys.Keys() {
		if e, err := l.kv.Get(ctx, key); err == nil {
			l.applyWorker(e)
		}
	}
	return nil
}

// leaderLister reads the latest values from a bucket's stream leader (store.KV).
type leaderLister interface {
	Latest(ctx context.Context, filter string) ([]jetstream.KeyValueEntry, error)
}
