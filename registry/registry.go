// Package registry keeps tool definitions (P_tools) and worker liveness
// (P_workers) in JetStream KV and serves them from a watch-fed cache, so the
// router's hot path never reads KV. It also decides on registrations: a
// definition is accepted when its name is valid, its schema compiles as an
// object schema with no external $ref, and it does not conflict with a
// different definition that live workers still serve.
package registry

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/kvcache"
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
	// Heartbeat is the workers' heartbeat; a worker is live while its last
	// beat is younger than three of them. Zero means bus.DefaultHeartbeat.
	Heartbeat time.Duration
	// Logger receives warnings about bad entries; nil discards.
	Logger *slog.Logger
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Registry is the cache of tools and workers of one deployment. It is safe
// for concurrent use.
type Registry struct {
	tools   jetstream.KeyValue
	workers jetstream.KeyValue
	cfg     Config
	health  *store.Health // where liveness writes note a full store

	mu       sync.RWMutex
	cache    *kvcache.Map[*Tool]        // by name, with the tombstones of deleted tools
	liveness map[string]map[string]beat // tool → worker → last beat
	version  uint64                     // bumped on every change
	probed   map[string]time.Time       // when Refresh last listed a tool's workers in KV
	trouble  time.Time                  // when a liveness write last failed

	watches []*store.Watch
	ready   chan struct{}

	workConsumer func(ctx context.Context, tool string) error // makes a durable tool's work consumer
	consumers    map[string]bool                              // durable tools whose consumer exists
}

// New returns a Registry over the store's tools and workers buckets. Call
// Start before use.
func New(st *store.Store, cfg Config) *Registry {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = bus.DefaultHeartbeat
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Registry{tools: st.Tools, workers: st.Workers, cfg: cfg, health: st.Health, workConsumer: st.WorkConsumer, consumers: map[string]bool{},
		cache: kvcache.New[*Tool](0), probed: map[string]time.Time{}, liveness: map[string]map[string]beat{}, ready: make(chan struct{})}
}

// Start begins watching both buckets and returns once the initial values are
// loaded or ctx ends. The watches run until ctx ends or Stop is called.
func (r *Registry) Start(ctx context.Context) error {
	tw, err := store.WatchKV(ctx, r.tools, ">", r.applyTool)
	if err != nil {
		return err
	}
	ww, err := store.WatchKV(ctx, r.workers, ">", r.applyWorker)
	if err != nil {
		tw.Stop()
		return err
	}
	r.watches = []*store.Watch{tw, ww}
	for _, w := range r.watches {
		select {
		case <-w.Ready():
		case <-ctx.Done():
			r.Stop()
			return ctx.Err()
		}
	}
	close(r.ready)
	return nil
}

// Ready is closed once the cache holds the initial values.
func (r *Registry) Ready() <-chan struct{} { return r.ready }

// Stop ends the watches. It is safe to call twice.
func (r *Registry) Stop() {
	for _, w := range r.watches {
		w.Stop()
	}
}

func (r *Registry) applyTool(e jetstream.KeyValueEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed, err := r.cache.Apply(e, func(val []byte) (*Tool, bool, error) {
		t, err := parseTool(val)
		if err == nil {
			t.rev = e.Revision()
		}
		return t, err == nil, err
	})
	if err != nil {
		r.cfg.Logger.Warn("registry: ignoring bad tool entry", "tool", e.Key(), "err", err)
	}
	if changed {
		r.version++
	}
}

// put caches t, unless a newer revision of it, or its delete, is cached.
func (r *Registry) put(t *Tool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cache.Put(t.Def.Name, t.rev, t) {
		r.version++
	}
}

// A P_tools value is the definition's JSON with one more key, "registered":
// when the tool was first registered (unix ns). Every router orders the
// listing by it, whenever it started and however often the tool changed.
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

// beat is what a router knows of one worker serving one tool.
type beat struct {
	at       time.Time // local time the beat was seen: no clock is compared with the server's
	rev      uint64
	left     bool     // the worker said it is leaving
	inflight []string // calls of the tool the worker was running (bus.CallKey); nil: it does not say
	binary   bool     // the worker takes io.toolbus.exec in binary mode (docs/protocol.md 5.1)
}

// beatValue is a P_workers value.
type beatValue struct {
	Left bool `json:"left,omitempty"`
	// InFlight is absent for a worker that does not report its calls in
	// flight, and a list, possibly empty, for one that does.
	InFlight []string `json:"inflight,omitempty"`
	// Binary says the worker takes exec requests in binary mode.
	Binary bool `json:"binary,omitempty"`
}

// leftValue is the liveness value of a worker that left; it expires with
// the bucket's TTL like any beat.
var leftValue = []byte(`{"left":true}`)

func (r *Registry) applyWorker(e jetstream.KeyValueEntry) {
	tool, worker, ok := strings.Cut(e.Key(), ".")
	if !ok {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		r.setBeat(tool, worker, beat{rev: e.Revision()}, true)
		return
	}
	var v beatValue
	_ = json.Unmarshal(e.Value(), &v)
	r.setBeat(tool, worker, beat{at: r.cfg.Now(), rev: e.Revision(), left: v.Left, inflight: v.InFlight, binary: v.Binary}, false)
}

// Troubled reports whether a liveness write failed within the last four
// heartbeats: the workers bucket could not take beats (a leader election, a
// node down), so beats that look missed may never have been stored, and
// nobody should be declared gone for them.
func (r *Registry) Troubled(now time.Time) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return !r.trouble.IsZero() && now.Sub(r.trouble) < 4*r.cfg.Heartbeat
}

// MayHold reports whether a live worker of the tool may be running the call
// key (bus.CallKey): one said so in its latest beat, or one does not report
// its calls in flight at all (a worker written from docs/protocol.md alone), so
// nobody can tell.
func (r *Registry) MayHold(tool, key string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	cutoff := r.cfg.Now().Add(-3 * r.cfg.Heartbeat)
	for _, b := range r.liveness[tool] {
		if !b.left && b.at.After(cutoff) && (b.inflight == nil || slices.Contains(b.inflight, key)) {
			return true
		}
	}
	return false
}

// encodeBeat is a beat's P_workers value: inflight present (possibly
// empty) only for a worker that reports its calls, binary only when true.
func encodeBeat(v beatValue) []byte {
	b := []byte{'{'}
	if v.InFlight != nil {
		in, _ := json.Marshal(v.InFlight)
		b = append(append(b, `"inflight":`...), in...)
	}
	if v.Binary {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, `"binary":true`...)
	}
	return append(b, '}')
}

// BinaryExec reports whether every live worker of the tool takes
// io.toolbus.exec in CloudEvents binary mode (docs/protocol.md 5.1): one
// of the previous revision in the queue group, or none live, means
// structured mode.
func (r *Registry) BinaryExec(tool string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	cutoff := r.cfg.Now().Add(-3 * r.cfg.Heartbeat)
	n := 0
	for _, b := range r.liveness[tool] {
		if b.left || !b.at.After(cutoff) {
			continue
		}
		if !b.binary {
			return false
		}
		n++
	}
	return n > 0
}

// sawBeat records a beat that this router took but could not store: the
// worker is live from now, at the revision the cache holds.
func (r *Registry) sawBeat(tool, worker string, inflight []string, binary bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.liveness[tool]
	if m == nil {
		m = map[string]beat{}
		r.liveness[tool] = m
	}
	b := m[worker]
	b.at, b.left, b.inflight, b.binary = r.cfg.Now(), false, inflight, binary
	m[worker] = b
	r.version++
}

// setBeat records b unless a newer revision is known already; remove drops
// the entry instead (a delete or purge).
func (r *Registry) setBeat(tool, worker string, b beat, remove bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.liveness[tool]
	if old, ok := m[worker]; ok && old.rev >= b.rev {
		return
	}
	r.version++
	if remove {
		delete(m, worker)
		if len(m) == 0 {
			delete(r.liveness, tool)
		}
		return
	}
	if m == nil {
		m = map[string]beat{}
		r.liveness[tool] = m
	}
	m[worker] = b
}

// Refresh reads tool name, and the liveness of its workers when the cache
// has none live, from KV into the cache. Routers call it for a call that the
// cache resolves to an unknown or unavailable tool: a registration
// acknowledged through another router a moment ago may not have reached
// this router's watch yet.
func (r *Registry) Refresh(ctx context.Context, name string) error {
	e, err := r.tools.Get(ctx, name)
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
	// Listing keys costs the server a consumer: a tool whose workers are
	// all gone, called again and again, is listed at most once a heartbeat.
	now := r.cfg.Now()
	r.mu.Lock()
	recent := now.Sub(r.probed[name]) < r.cfg.Heartbeat
	if !recent {
		r.probed[name] = now
	}
	r.mu.Unlock()
	if recent {
		return nil
	}
	keys, err := r.workers.ListKeysFiltered(ctx, name+".*")
	if err != nil {
		return err
	}
	for key := range keys.Keys() {
		if e, err := r.workers.Get(ctx, key); err == nil {
			r.applyWorker(e)
		}
	}
	return nil
}

// Lookup returns the tool named name, live or not.
func (r *Registry) Lookup(name string) (*Tool, bool) {
	r.mu.RLock()
	t, ok := r.cache.Get(name)
	r.mu.RUnlock()
	return t, ok
}

// Live reports whether a call to the tool can be served: it is external, or
// at least one worker has beaten within three heartbeats.
func (r *Registry) Live(t *Tool) bool {
	if t.Def.External {
		return true
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.liveLocked(t.Def.Name, "")
}

func (r *Registry) liveLocked(tool, except string) bool {
	cutoff := r.cfg.Now().Add(-3 * r.cfg.Heartbeat)
	for w, b := range r.liveness[tool] {
		if w != except && !b.left && b.at.After(cutoff) {
			return true
		}
	}
	return false
}

// Workers returns the number of live workers per tool.
func (r *Registry) Workers() map[string]int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	cutoff := r.cfg.Now().Add(-3 * r.cfg.Heartbeat)
	out := map[string]int{}
	for tool, ws := range r.liveness {
		for _, b := range ws {
			if !b.left && b.at.After(cutoff) {
				out[tool]++
			}
		}
	}
	return out
}

// Tools returns every registered tool in the order it was first registered.
func (r *Registry) Tools() []*Tool {
	r.mu.RLock()
	out := make([]*Tool, 0, r.cache.Len())
	for _, t := range r.cache.All() {
		out = append(out, t)
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b *Tool) int {
		return cmp.Or(cmp.Compare(a.order, b.order), cmp.Compare(a.Def.Name, b.Def.Name))
	})
	return out
}

// Version changes whenever the cache changes; callers use it to invalidate
// what they derived from the cache.
func (r *Registry) Version() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.version
}

// Register applies one registration or heartbeat: each definition is checked
// and stored (only when it changed, with compare-and-set), then the worker's
// liveness is refreshed for the accepted tools. A leaving worker's liveness is
// removed at once. Errors reaching KV are returned; rejections are in the ack.
func (r *Registry) Register(ctx context.Context, reg bus.Register) (bus.RegisterAck, error) {
	ack := bus.RegisterAck{Accepted: []string{}, Rejected: []bus.Rejection{}}
	if !bus.ValidID(reg.Worker) {
		return ack, bus.Errorf(bus.CodeBadRequest, "worker id %q must match ^[A-Za-z0-9_-]{1,128}$", reg.Worker)
	}
	if reg.Leaving {
		return ack, r.leave(ctx, reg.Worker)
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
		reason, err := r.store(ctx, reg.Worker, d)
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
		if d != nil && d.Def.Durable {
			if err := r.ensureConsumer(ctx, name); err != nil {
				return ack, err
			}
		}
		key := name + "." + reg.Worker
		bv := beatValue{Binary: reg.BinaryExec}
		if reg.InFlight != nil { // the worker reports its calls in flight
			bv.InFlight = reg.InFlight[name]
			if bv.InFlight == nil {
				bv.InFlight = []string{}
			}
		}
		inflight := bv.InFlight
		val := encodeBeat(bv)
		rev, err := r.workers.Put(ctx, key, val)
		full := r.health.Note(err)
		if err != nil {
			// This router saw the beat: the worker is live whatever the
			// bucket took. The cache keeps it so (at the revision it
			// holds), so that a store that refuses writes does not make
			// every tool look dead here; the other routers see the worker
			// again when the bucket takes beats again.
			r.mu.Lock()
			r.trouble = r.cfg.Now()
			r.mu.Unlock()
			r.sawBeat(name, reg.Worker, inflight, reg.BinaryExec)
			if full {
				continue // the worker is live; the router reports the store full (status)
			}
			return ack, fmt.Errorf("registry: liveness %s: %w", key, err)
		}
		r.setBeat(name, reg.Worker, beat{at: r.cfg.Now(), rev: rev, inflight: inflight, binary: reg.BinaryExec}, false)
	}
	return ack, nil
}

// ensureConsumer makes the work consumer of durable tool name once per
// router process (CreateOrUpdate is idempotent, so routers racing is fine).
func (r *Registry) ensureConsumer(ctx context.Context, name string) error {
	r.mu.RLock()
	done := r.consumers[name]
	r.mu.RUnlock()
	if done {
		return nil
	}
	if err := r.workConsumer(ctx, name); err != nil {
		return err
	}
	r.mu.Lock()
	r.consumers[name] = true
	r.mu.Unlock()
	return nil
}

// Check returns why d cannot be registered, or "" when it can. It compiles
// the schema; it does not look at conflicts.
func Check(d *bus.ToolDef) (string, *schemas.Schema) {
	if !bus.ValidName(d.Name) {
		return fmt.Sprintf("name %q must match ^[A-Za-z0-9_-]{1,64}$", d.Name), nil
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
	if d.Durable && d.External {
		return "an external tool cannot be durable: its calls already wait, durably, for their handler", nil
	}
	if len(d.InputSchema) == 0 || string(d.InputSchema) == "null" {
		return "input_schema is missing", nil
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

// store writes d unless it is invalid or conflicts; it returns the rejection
// reason, or an error when KV fails.
func (r *Registry) store(ctx context.Context, worker string, d bus.ToolDef) (string, error) {
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
	)
	rev, err := store.Update(ctx, r.tools, d.Name, store.Bounded, func(entry jetstream.KeyValueEntry) ([]byte, error) {
		reason, same, registered = "", nil, time.Now().UnixNano()
		if entry != nil {
			if cur, perr := parseTool(entry.Value()); perr == nil {
				if cur.Def.Equal(&d) {
					same = cur
					return nil, store.ErrNoChange
				}
				r.mu.RLock()
				conflict := !cur.Def.External && r.liveLocked(d.Name, worker)
				r.mu.RUnlock()
				if conflict {
					reason = fmt.Sprintf("conflicts with a different live definition of %q", d.Name)
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

// leave marks a worker gone at once: its liveness entries are overwritten
// with a "left" value (not deleted, so that a heartbeat still in flight, with
// an older revision, cannot bring it back in any router's cache).
func (r *Registry) leave(ctx context.Context, worker string) error {
	r.mu.RLock()
	var tools []string
	for tool, ws := range r.liveness {
		if _, ok := ws[worker]; ok {
			tools = append(tools, tool)
		}
	}
	r.mu.RUnlock()
	for _, tool := range tools {
		rev, err := r.workers.Put(ctx, tool+"."+worker, leftValue)
		if err != nil {
			return fmt.Errorf("registry: leave %s.%s: %w", tool, worker, err)
		}
		r.setBeat(tool, worker, beat{rev: rev, left: true}, false)
	}
	return nil
}

// Delete removes a tool definition (the admin verb tools.delete).
func (r *Registry) Delete(ctx context.Context, name string) error {
	rev, err := store.Delete(ctx, r.tools, name, store.Bounded)
	if err != nil {
		return fmt.Errorf("registry: delete %s: %w", name, err)
	}
	r.mu.Lock()
	if r.cache.Delete(name, max(rev, r.cache.Rev(name))) {
		r.version++
	}
	r.mu.Unlock()
	return nil
}
