// Package registry keeps tool definitions (P_tools) and worker liveness
// (P_workers) in JetStream KV and serves them from a watch-fed cache, so the
// router's hot path never reads KV. It also decides on registrations: a
// definition is accepted when its name is valid, its schema compiles as an
// object schema with no external $ref, and it does not conflict with a
// different definition that live workers still serve.
package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
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

// Registry is the cache of tools and workers of one deployment, and the
// decisions on registrations. It is the owner of two parts, embedded so
// that its callers keep one handle: catalog, the definitions of P_tools
// (catalog.go: Lookup, Tools, Delete), and liveness, the workers' beats in
// P_workers (liveness.go: Live, Workers, MayHold, BinaryExec, Troubled).
// It declares the lifecycle, Refresh and Register itself. It is safe for
// concurrent use.
type Registry struct {
	*catalog
	*liveness

	cfg     Config
	version atomic.Uint64 // bumped on every change of either part
	watches []*store.Watch
	ready   chan struct{}

	workConsumer func(ctx context.Context, tool string) error // makes a durable tool's work consumer
	mu           sync.Mutex
	consumers    map[string]bool // durable tools whose consumer exists, guarded by mu
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
	r := &Registry{cfg: cfg, workConsumer: st.WorkConsumer, consumers: map[string]bool{}, ready: make(chan struct{})}
	r.catalog = newCatalog(st.Tools, cfg.Logger, &r.version)
	r.liveness = &liveness{kv: st.Workers, heartbeat: cfg.Heartbeat, now: cfg.Now, health: st.Health, version: &r.version,
		beats: map[string]map[string]beat{}, probed: map[string]time.Time{}}
	return r
}

// Start begins watching both buckets and returns once the initial values are
// loaded or ctx ends. The watches run until ctx ends or Stop is called.
func (r *Registry) Start(ctx context.Context) error {
	tw, err := store.WatchKV(ctx, r.catalog.kv, ">", r.applyTool)
	if err != nil {
		return err
	}
	ww, err := store.WatchKV(ctx, r.liveness.kv, ">", r.applyWorker)
	if err != nil {
		_ = tw.Stop(ctx)
		return err
	}
	r.watches = []*store.Watch{tw, ww}
	for _, w := range r.watches {
		select {
		case <-w.Ready():
		case <-ctx.Done():
			_ = r.Stop(context.WithoutCancel(ctx))
			return ctx.Err()
		}
	}
	close(r.ready)
	return nil
}

// Ready is closed once the cache holds the initial values.
func (r *Registry) Ready() <-chan struct{} { return r.ready }

// Stop ends the watches, waiting for them until ctx ends. It is safe to
// call twice.
func (r *Registry) Stop(ctx context.Context) error { return store.StopAll(ctx, r.watches...) }

// Version changes whenever the cache changes; callers use it to invalidate
// what they derived from the cache.
func (r *Registry) Version() uint64 { return r.version.Load() }

// Refresh reads tool name, and the liveness of its workers when the cache
// has none live, from KV into the cache. Routers call it for a call that the
// cache resolves to an unknown or unavailable tool: a registration
// acknowledged through another router a moment ago may not have reached
// this router's watch yet.
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
	return r.probe(ctx, name)
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
		bv := bus.WorkerBeat{Binary: reg.BinaryExec}
		if reg.InFlight != nil { // the worker reports its calls in flight
			bv.InFlight = reg.InFlight[name]
			if bv.InFlight == nil {
				bv.InFlight = []string{}
			}
		}
		if err := r.record(ctx, name, reg.Worker, bv); err != nil {
			return ack, err
		}
	}
	return ack, nil
}

// ensureConsumer makes the work consumer of durable tool name once per
// router process (CreateOrUpdate is idempotent, so routers racing is fine).
func (r *Registry) ensureConsumer(ctx context.Context, name string) error {
	r.mu.Lock()
	done := r.consumers[name]
	r.mu.Unlock()
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
	rev, err := store.Update(ctx, r.catalog.kv, d.Name, store.Bounded, func(entry jetstream.KeyValueEntry) ([]byte, error) {
		reason, same, registered = "", nil, time.Now().UnixNano()
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

// defDiff names the members of two tool definitions that differ, as
// encoded ("description", "input_schema", ...), so that a rejection says
// what two routers or workers disagree on.
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
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			diff = append(diff, k)
		}
	}
	slices.Sort(diff)
	if len(diff) == 0 {
		diff = []string{"nothing encoded"}
	}
	return diff
}
