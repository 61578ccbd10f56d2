package groups

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

type group struct {
	def   bus.Group
	order int64 // when the group was first put (unix ns), stored with it
	rev   uint64
}

// definitions is P_groups' watch-fed cache, its order and its writes.
type definitions struct {
	kv    jetstream.KeyValue
	log   *slog.Logger
	names *store.Count // the bound on new names (nil: none)

	groups  *store.Ordered[*group]
	ordered atomic.Pointer[[]bus.Group] // meta and external groups in registration order; rebuilt on change

	watch *store.Watch // Store.Start's

	// searchBasic makes basic a meta group like the others (search on,
	// docs/protocol.md 4.2): switched per session, off in a new one.
	searchBasic bool
}

// BasicSearchDescription is basic's description while search is on, when it
// is a group the model switches (docs/protocol.md 4.2).
const BasicSearchDescription = "Tools registered without a group."

// basicMeta is basic as a meta group, for search.
var basicMeta = bus.Group{Name: bus.GroupBasic, Description: BasicSearchDescription, Scope: bus.ScopeMeta}

func newDefinitions(kv jetstream.KeyValue, log *slog.Logger) *definitions {
	d := &definitions{kv: kv, log: log, names: store.CountOf(kv)}
	d.ordered.Store(&[]bus.Group{})
	d.groups = store.NewOrdered(kv, func(g *group) int64 { return g.order }, func(gs []*group) {
		ordered := make([]bus.Group, len(gs))
		for i, g := range gs {
			ordered[i] = g.def
		}
		d.ordered.Store(&ordered)
	})
	return d
}

func (d *definitions) applyGroup(e jetstream.KeyValueEntry) {
	err := d.groups.Apply(e, func(val []byte) (*group, bool, error) {
		var rec groupRecord
		if err := json.Unmarshal(val, &rec); err != nil {
			return nil, false, err
		}
		if err := CheckGroup(&rec.Group); err != nil {
			return nil, false, err
		}
		return newGroup(rec.Group, e.Revision(), rec.Registered), true, nil
	})
	if err != nil {
		d.log.Warn("groups: ignoring bad group entry", "group", e.Key())
	}
}

// groupRecord is a P_groups value: the group's JSON with "registered", when
// it was first put (unix ns), so every router lists groups in one order.
type groupRecord struct {
	bus.Group
	Registered int64 `json:"registered"`
}

// newGroup is g cached at rev, first put at order (zero: rev stands in).
func newGroup(g bus.Group, rev uint64, order int64) *group {
	return &group{def: g, order: cmp.Or(order, int64(rev)), rev: rev}
}

// Put stores a group definition when it is new or changed: the operator's
// (the config file, groups.put), taken past the catalogue's bound.
func (d *definitions) Put(ctx context.Context, g bus.Group) error { return d.put(ctx, g, nil) }

// Register is Put for a group that came with a registration (protocol
// 7.1): a new name past the catalogue's bound is refused (1.25).
func (d *definitions) Register(ctx context.Context, g bus.Group) error { return d.put(ctx, g, d.names) }

// Refusal is the catalogue bound's refusal of a worker's definition of
// name, judged before the definition is decoded (its subject names it):
// "" when the name is held, cached or stored, or has room now.
func (d *definitions) Refusal(ctx context.Context, name string) string {
	if _, ok := d.groups.Get(name); ok {
		return ""
	}
	if reason, room := d.names.Judge(d.groups.Len()); !room {
		if _, err := d.kv.Get(ctx, name); errors.Is(err, jetstream.ErrKeyNotFound) {
			return reason
		}
	}
	return ""
}

func (d *definitions) put(ctx context.Context, g bus.Group, names *store.Count) error {
	g.Scope = cmp.Or(g.Scope, bus.ScopeMeta)
	if err := CheckGroup(&g); err != nil {
		return err
	}
	registered := time.Now().UnixNano()
	cur, ok := d.groups.Get(g.Name)
	if ok {
		if cur.def.Equal(g) {
			return nil
		}
		registered = cur.order // an update keeps the group's place
	} else if reason, taken := names.Take(d.groups.Len()); taken {
		defer names.Done() // once cached, below
	} else if _, err := d.kv.Get(ctx, g.Name); err != nil {
		// Past the catalogue's bound (protocol 7.1, 1.25) a name stored
		// already (another router's, not yet watched here) is still taken.
		return bus.Errorf(bus.CodeLimitExceeded, "%s", reason)
	}
	b, err := json.Marshal(groupRecord{Group: g, Registered: registered})
	if err != nil {
		return err
	}
	rev, err := d.kv.Put(ctx, g.Name, b)
	if store.IsMaxMsgs(err) && d.names != nil {
		return bus.Errorf(bus.CodeLimitExceeded, "%s", d.names.Full())
	}
	if err != nil {
		return fmt.Errorf("groups: put %s: %w", g.Name, err)
	}
	d.groups.Put(g.Name, rev, newGroup(g, rev, registered))
	return nil
}

// Delete removes a group definition (an undefined group is never active).
func (d *definitions) Delete(ctx context.Context, name string) error {
	if err := d.groups.Delete(ctx, name); err != nil {
		return fmt.Errorf("groups: %w", err)
	}
	return d.names.Marked(ctx) // the marker's room in max_msgs
}

// Group returns the definition of a group.
func (d *definitions) Group(name string) (bus.Group, bool) {
	g, ok := d.groups.Get(name)
	if !ok {
		return bus.Group{}, false
	}
	return g.def, true
}

// Groups returns the defined groups (no basic) in order; do not modify.
func (d *definitions) Groups() []bus.Group { return *d.ordered.Load() }

func (d *definitions) hasMeta() bool {
	return d.searchBasic || slices.ContainsFunc(d.Groups(), func(g bus.Group) bool { return g.Scope == bus.ScopeMeta })
}

// metaGroups are the groups the model switches (with search, basic first).
func (d *definitions) metaGroups() []bus.Group {
	return slices.DeleteFunc(slices.Clone(d.allGroups()), func(g bus.Group) bool { return g.Scope != bus.ScopeMeta })
}

// allGroups is Groups with basic first when search is on.
func (d *definitions) allGroups() []bus.Group {
	if !d.searchBasic {
		return d.Groups()
	}
	return append([]bus.Group{basicMeta}, d.Groups()...)
}

// resetDef returns reset_tools' definition: a boolean property per meta group, in
// order, described, default false, none required; false without meta groups.
func (d *definitions) resetDef() (bus.ToolDef, bool) {
	meta := d.metaGroups()
	if len(meta) == 0 {
		return bus.ToolDef{}, false
	}
	// Properties are written by hand so that their order is registration order.
	var b bytes.Buffer
	b.WriteString(`{"type":"object","properties":{`)
	for i, g := range meta {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(g.Name)
		desc, _ := json.Marshal(g.Description)
		fmt.Fprintf(&b, `%s:{"type":"boolean","default":false,"description":%s}`, name, desc)
	}
	b.WriteString(`}}`)
	t := bus.ToolDef{Name: ResetTools, Description: resetDescription, InputSchema: b.Bytes(), ConcurrencySafe: false}
	t.Defaults()
	return t, true
}
