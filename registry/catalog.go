package registry

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
	"github.com/toolbus/toolbus/store"
)

// catalog is the tool definitions of P_tools: a watch-fed cache, with the
// tombstones of deleted tools, and the admin delete. Registrations are
// decided by the Registry (store), which caches what it wrote with put.
// Safe for concurrent use.
type catalog struct {
	kv      jetstream.KeyValue
	log     *slog.Logger
	version *atomic.Uint64 // the Registry's, bumped on every change

	mu    sync.RWMutex
	cache *store.Cache[*Tool] // by name, with the tombstones of deleted tools
}

func (c *catalog) applyTool(e jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed, err := c.cache.Apply(e, func(val []byte) (*Tool, bool, error) {
		t, err := parseTool(val)
		if err == nil {
			t.rev = e.Revision()
		}
		return t, err == nil, err
	})
	if err != nil {
		c.log.Warn("registry: ignoring bad tool entry", "tool", e.Key(), "err", err)
	}
	if changed {
		c.version.Add(1)
	}
}

// put caches t, unless a newer revision of it, or its delete, is cached.
func (c *catalog) put(t *Tool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cache.Put(t.Def.Name, t.rev, t) {
		c.version.Add(1)
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

// Lookup returns the tool named name, live or not.
func (c *catalog) Lookup(name string) (*Tool, bool) {
	c.mu.RLock()
	t, ok := c.cache.Get(name)
	c.mu.RUnlock()
	return t, ok
}

// Tools returns every registered tool in the order it was first registered.
func (c *catalog) Tools() []*Tool {
	c.mu.RLock()
	out := make([]*Tool, 0, c.cache.Len())
	for _, t := range c.cache.All() {
		out = append(out, t)
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b *Tool) int {
		return cmp.Or(cmp.Compare(a.order, b.order), cmp.Compare(a.Def.Name, b.Def.Name))
	})
	return out
}

// Delete removes a tool definition (the admin verb tools.delete).
func (c *catalog) Delete(ctx context.Context, name string) error {
	rev, err := store.Delete(ctx, c.kv, name, store.Bounded)
	if err != nil {
		return fmt.Errorf("registry: delete %s: %w", name, err)
	}
	c.mu.Lock()
	if c.cache.DeleteOwn(name, rev) {
		c.version.Add(1)
	}
	c.mu.Unlock()
	return nil
}
