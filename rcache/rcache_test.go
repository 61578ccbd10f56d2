package rcache

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newCache(t *testing.T, now func() time.Time) *Cache {
	t.Helper()
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	c, err := New(t.Context(), js, bus.NewSubjects(bus.DefaultPrefix), Config{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func def(scope string) *bus.ToolDef {
	return &bus.ToolDef{Name: "get_weather", Description: "d", InputSchema: json.RawMessage(`{"type":"object"}`), ReadOnly: true, CacheTTLMS: 60_000, CacheScope: scope}
}

func ok(text string) bus.Result {
	return bus.Result{ID: "c1", Name: "get_weather", State: bus.StateSuccess, Output: bus.Text(text)}
}

func TestCheckDef(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*bus.ToolDef)
		want string
	}{
		{"read-only", func(*bus.ToolDef) {}, ""},
		{"idempotent", func(d *bus.ToolDef) { d.ReadOnly, d.Idempotent = false, true }, ""},
		{"no cache", func(d *bus.ToolDef) { d.ReadOnly, d.CacheTTLMS = false, 0 }, ""},
		{"write tool", func(d *bus.ToolDef) { d.ReadOnly = false }, "only for read_only or idempotent tools"},
		{"external", func(d *bus.ToolDef) { d.External = true }, "not for external tools"},
		{"state", func(d *bus.ToolDef) { d.StateInjected = true }, "state_injected"},
		{"scope", func(d *bus.ToolDef) { d.CacheScope = "tenant" }, "must be session, user or global"},
		{"scope without ttl", func(d *bus.ToolDef) { d.CacheTTLMS = 0; d.CacheScope = "user" }, "needs cache_ttl_ms"},
		{"negative", func(d *bus.ToolDef) { d.CacheTTLMS = -1 }, "needs cache_ttl_ms"},
		{"too long", func(d *bus.ToolDef) { d.CacheTTLMS = 25 * 3600_000 }, "past"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := def("")
			tc.edit(d)
			got := CheckDef(d)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("CheckDef = %q, want %q", got, tc.want)
			}
			if _, cacheable := Key(d, "s", "u", nil); cacheable != (tc.want == "" && d.CacheTTLMS > 0) {
				t.Fatalf("Key cacheable = %v", cacheable)
			}
		})
	}
}

func TestHitMissExpiry(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	c := newCache(t, clk.Now)
	k, _ := Key(def(""), "s1", "alice", json.RawMessage(`{"city":"Oslo"}`))
	if _, hit := c.Get(t.Context(), k); hit {
		t.Fatal("hit on an empty cache")
	}
	if !c.Put(t.Context(), k, time.Minute, ok("sunny")) {
		t.Fatal("not stored")
	}
	clk.Add(30 * time.Second)
	res, hit := c.Get(t.Context(), k)
	if !hit || res.Output[0].Text != "sunny" {
		t.Fatalf("Get = %+v %v", res, hit)
	}
	var meta map[string]struct {
		Hit   bool  `json:"hit"`
		AgeMS int64 `json:"age_ms"`
	}
	if err := json.Unmarshal(res.Metadata, &meta); err != nil || !meta[MetadataKey].Hit || meta[MetadataKey].AgeMS != 30_000 {
		t.Fatalf("metadata %s", res.Metadata)
	}
	// The same input written differently is the same key.
	k2, _ := Key(def(""), "s1", "alice", json.RawMessage(`{ "city" : "Oslo" }`))
	if k2 != k {
		t.Fatal("whitespace changed the key")
	}
	clk.Add(30 * time.Second) // the TTL has passed
	if _, hit := c.Get(t.Context(), k); hit {
		t.Fatal("hit after the TTL")
	}
	// A new result replaces the expired one.
	if !c.Put(t.Context(), k, time.Minute, ok("rain")) {
		t.Fatal("not replaced")
	}
	if res, hit := c.Get(t.Context(), k); !hit || res.Output[0].Text != "rain" {
		t.Fatalf("after replace: %+v %v", res, hit)
	}
	// Failures are never stored.
	k3, _ := Key(def(""), "s1", "", json.RawMessage(`{"city":"Bergen"}`))
	if c.Put(t.Context(), k3, time.Minute, bus.ErrorResult(bus.Call{ID: "c", Name: "get_weather"}, bus.CodeToolError, "boom")) {
		t.Fatal("an error was stored")
	}
}

func TestScopes(t *testing.T) {
	in := json.RawMessage(`{"city":"Oslo"}`)
	key := func(scope, session, user string) string { k, _ := Key(def(scope), session, user, in); return k }
	for _, tc := range []struct {
		scope      string
		a, b       [2]string // session, user
		sameBefore bool
	}{
		{ScopeSession, [2]string{"s1", "alice"}, [2]string{"s1", "bob"}, false}, // the tool gets the user (TestAttackCacheAcrossUsers)
		{ScopeSession, [2]string{"s1", "alice"}, [2]string{"s1", ""}, false},
		{ScopeSession, [2]string{"s1", "alice"}, [2]string{"s1", "alice"}, true},
		{ScopeSession, [2]string{"s1;user=5:alice", ""}, [2]string{"s1", "alice"}, false},
		{ScopeSession, [2]string{"s1", "alice"}, [2]string{"s2", "alice"}, false},
		{ScopeUser, [2]string{"s1", "alice"}, [2]string{"s2", "alice"}, true},
		{ScopeUser, [2]string{"s1", "alice"}, [2]string{"s1", "bob"}, false},
		{ScopeUser, [2]string{"s1", ""}, [2]string{"s2", ""}, false}, // no user: per session
		{ScopeGlobal, [2]string{"s1", "alice"}, [2]string{"s2", "bob"}, true},
	} {
		if same := key(tc.scope, tc.a[0], tc.a[1]) == key(tc.scope, tc.b[0], tc.b[1]); same != tc.sameBefore {
			t.Errorf("scope %s %v vs %v: same key %v, want %v", tc.scope, tc.a, tc.b, same, tc.sameBefore)
		}
	}
	// Another definition of the tool never matches the old entries.
	d := def("")
	k1, _ := Key(d, "s1", "", in)
	d.Description = "changed"
	if k2, _ := Key(d, "s1", "", in); k1 == k2 {
		t.Fatal("a changed definition keeps its key")
	}
}

// TestOnCluster: the bucket with per-key TTLs on the 3-node cluster,
// replicas 3; an entry stored through one node is a hit through another.
func TestOnCluster(t *testing.T) {
	cl := testkit.RunCluster(t)
	open := func(node int) *Cache {
		js := testkit.JetStream(t, testkit.ConnectURL(t, cl.URL(node)))
		c, err := New(t.Context(), js, bus.NewSubjects(bus.DefaultPrefix), Config{Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := open(0), open(2)
	k, _ := Key(def(ScopeGlobal), "s1", "", json.RawMessage(`{"city":"Oslo"}`))
	if !a.Put(t.Context(), k, time.Minute, ok("sunny")) {
		t.Fatal("not stored")
	}
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if _, hit := b.Get(t.Context(), k); !hit {
			return errNoHit
		}
		return nil
	})
}

var errNoHit = errors.New("no hit through the other node")
