package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
	"github.com/toolbus/toolbus/store"
)

// catalog is the tool definitions of P_tools: a watch-fed cache, with the
// tombstones of deleted tools, listed in registration order, and the admin
// delete. Registrations are decided by the Registry (store), which caches
// what it wrote with put. Safe for concurrent use.
type catalog struct {
	kv    jetstream.KeyValue
	log   *slog.Logger
	tools *store.Ordered[*Tool] // bumps the Registry's version on every change
}

func newCatalog(kv jetstream.KeyValue, log *slog.Logger, version *atomic.Uint64) *catalog {
	return &catalog{kv: kv, log: log, tools: store.NewOrdered(kv, func(t *Tool) int64 { return t.order },
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
func (c *catalog) Lookup(name string) (*Tool, bool) { return c.tools.Get(name) }

// Tools returns every registered tool in the order it was first registered.
func (c *catalog) Tools() []*Tool { return slices.Clone(c.tools.List()) }

// Delete removes a tool definition (the admin verb tools.delete).
func (c *catalog) Delete(ctx context.Context, name string) error {
	if err := c.tools.Delete(ctx, name); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}
