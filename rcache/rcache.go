// Package rcache is the result cache of tools with cache_ttl_ms: a repeated
// call is answered from KV (docs/protocol.md 3.3, 7.2, docs/guardrails.md).
package rcache

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// Scopes of cache_scope.
const (
	ScopeSession = "session"
	ScopeUser    = "user"
	ScopeGlobal  = "global"
)

// Bounds.
const (
	Bucket      = "rcache"
	MaxTTL      = 24 * time.Hour
	MaxEntry    = 256 << 10 // bytes of one stored result; larger ones are not cached
	MetadataKey = "toolbus_cache"
	// DefaultMaxBytes is Config.MaxBytes's default (session 37).
	DefaultMaxBytes = 256 << 20
)

// CheckDef returns why d's cache fields cannot be registered, or "".
func CheckDef(d *bus.ToolDef) string {
	if d.CacheTTLMS == 0 && d.CacheScope == "" {
		return ""
	}
	switch {
	case d.CacheTTLMS <= 0:
		return "cache_scope needs cache_ttl_ms > 0"
	case d.CacheTTLMS > MaxTTL.Milliseconds():
		return fmt.Sprintf("cache_ttl_ms %d is past %d (24 h)", d.CacheTTLMS, MaxTTL.Milliseconds())
	case !d.ReadOnly && !d.Idempotent:
		return "cache_ttl_ms is only for read_only or idempotent tools: a cached answer would skip a write"
	case d.External:
		return "cache_ttl_ms is not for external tools: their handlers answer each call"
	case d.StateInjected:
		return "cache_ttl_ms is not for state_injected tools: their results depend on agent state the cache key does not hold"
	}
	switch d.CacheScope {
	case "", ScopeSession, ScopeUser, ScopeGlobal:
	default:
		return fmt.Sprintf("cache_scope %q must be session, user or global", d.CacheScope)
	}
	return ""
}

// Config configures a Cache.
type Config struct {
	Replicas int  // of the bucket; zero means 1
	Memory   bool // keep the bucket in memory
	// MaxBytes bounds the bucket; past it the oldest entries are dropped
	// (misses: their calls run again). Zero means DefaultMaxBytes,
	// negative no bound.
	MaxBytes int64
	// Now is the clock entries are judged by; nil means time.Now.
	Now func() time.Time
}

// Cache is the result cache, shared by a deployment's routers; concurrency-safe.
type Cache struct {
	kv    jetstream.KeyValue
	now   func() time.Time
	bytes *store.Bound // reads the bucket's bytes against its bound (Bytes)
}

// New creates (or opens) the cache bucket: per-key TTLs, one value per key.
func New(ctx context.Context, js jetstream.JetStream, s bus.Subjects, cfg Config) (*Cache, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	storage := store.StorageOf(cfg.Memory)
	c := &Cache{now: cfg.Now}
	stream := "KV_" + s.Bucket(Bucket)
	err := store.Retry(ctx, store.Provision, func(ctx context.Context) error {
		st, err := js.Stream(ctx, stream)
		if err != nil { // none yet: created, empty
			if _, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
				Bucket: s.Bucket(Bucket), Description: "toolbus result cache of read-only and idempotent tools",
				TTL: MaxTTL + time.Hour, LimitMarkerTTL: time.Minute, Replicas: max(cfg.Replicas, 1), Storage: storage,
				MaxBytes: cmp.Or(cfg.MaxBytes, DefaultMaxBytes),
			}); err != nil {
				return err
			}
			if st, err = js.Stream(ctx, stream); err != nil {
				return err
			}
		}
		// A KV bucket refuses new values when full; a cache drops its
		// oldest. Its stream is updated as one: CreateOrUpdateKeyValue
		// would make it discard new again until then, refusing the
		// results other routers store meanwhile.
		sc := st.CachedInfo().Config
		sc.Discard, sc.MaxBytes, sc.Replicas, sc.Storage = jetstream.DiscardOld, cmp.Or(cfg.MaxBytes, DefaultMaxBytes), max(cfg.Replicas, 1), storage
		if _, err = js.UpdateStream(ctx, sc); err == nil {
			c.kv, err = js.KeyValue(ctx, s.Bucket(Bucket))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rcache: bucket %s: %w", s.Bucket(Bucket), err)
	}
	c.bytes = store.NewBound(ctx, c.kv, cmp.Or(cfg.MaxBytes, DefaultMaxBytes))
	return c, nil
}

// Bytes is the bucket's bytes against MaxBytes for status and metrics
// (nil: no bound); nothing is refused at it, the oldest entries go.
func (c *Cache) Bytes() *store.Bound { return c.bytes }

// Key is a call's cache key, digesting the whole definition, and whether it is
// cacheable; a user-scoped tool without a user is cached per session, and a
// session-scoped one per session and user (the tool gets the user).
func Key(d *bus.ToolDef, session, user string, input json.RawMessage) (string, bool) {
	if d.CacheTTLMS <= 0 || CheckDef(d) != "" {
		return "", false
	}
	h := sha256.New()
	def, _ := json.Marshal(d)
	fmt.Fprintf(h, "def=%d:%s;", len(def), def)
	switch scope := d.CacheScope; {
	case scope == ScopeGlobal:
		h.Write([]byte("global;"))
	case scope == ScopeUser && user != "":
		fmt.Fprintf(h, "user=%d:%s;", len(user), user)
	default: // a session's calls by one user: a tool may answer by its user
		fmt.Fprintf(h, "session=%d:%s;user=%d:%s;", len(session), session, len(user), user)
	}
	h.Write([]byte(bus.InputDigest(input)))
	return d.Name + "." + hex.EncodeToString(h.Sum(nil)[:20]), true
}

// entry is a stored result.
type entry struct {
	Stored  int64      `json:"stored"`  // unix ms
	Expires int64      `json:"expires"` // unix ms
	Result  bus.Result `json:"result"`
}

// Get returns the result stored under key, marked as a hit, or false. A
// KV error counts as a miss (the call then runs).
func (c *Cache) Get(ctx context.Context, key string) (bus.Result, bool) {
	e, err := c.kv.Get(ctx, key)
	if err != nil {
		return bus.Result{}, false
	}
	var en entry
	now := c.now().UnixMilli()
	if json.Unmarshal(e.Value(), &en) != nil || now >= en.Expires {
		return bus.Result{}, false
	}
	res := en.Result
	res.Metadata = mark(res.Metadata, en.Stored, now-en.Stored)
	return res, true
}

// Put stores a successful result for ttl unless it refers to stored outputs
// or exceeds MaxEntry; the first one stays. Errors are ignored.
func (c *Cache) Put(ctx context.Context, key string, ttl time.Duration, res bus.Result) bool {
	if res.State != bus.StateSuccess ||
		slices.ContainsFunc(res.Output, func(b bus.Block) bool { return strings.HasPrefix(b.URL, "nats-object:") }) {
		return false
	}
	now := c.now()
	b, err := json.Marshal(entry{Stored: now.UnixMilli(), Expires: now.Add(ttl).UnixMilli(), Result: res})
	if err != nil || len(b) > MaxEntry {
		return false
	}
	// The key's own TTL bounds storage; the expiry inside the value is
	// what a read judges by, to the millisecond (KV TTLs are whole seconds).
	kvTTL := max(time.Second, ttl.Round(time.Second)+time.Second)
	_, err = c.kv.Create(ctx, key, b, jetstream.KeyTTL(kvTTL))
	if err != nil {
		// An expired entry still there (its TTL rounds up): replace it.
		if e, gerr := c.kv.Get(ctx, key); gerr == nil {
			var old entry
			if json.Unmarshal(e.Value(), &old) == nil && now.UnixMilli() >= old.Expires {
				if c.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())) == nil {
					_, err = c.kv.Create(ctx, key, b, jetstream.KeyTTL(kvTTL))
				}
			}
		}
	}
	return err == nil
}

// mark adds {"toolbus_cache": {"hit": true, ...}} to object (or absent) metadata.
func mark(meta json.RawMessage, stored, age int64) json.RawMessage {
	m := map[string]json.RawMessage{}
	if len(meta) > 0 && json.Unmarshal(meta, &m) != nil {
		return meta
	}
	info, _ := json.Marshal(struct {
		Hit      bool   `json:"hit"`
		StoredAt string `json:"stored_at"`
		AgeMS    int64  `json:"age_ms"`
	}{true, time.UnixMilli(stored).UTC().Format(time.RFC3339Nano), age})
	m[MetadataKey] = info
	out, _ := json.Marshal(m)
	return out
}
