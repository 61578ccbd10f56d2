package groups

import (
	"encoding/json"
	"log/slog"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/session"
)

// The parts of Store are tested alone here, without a server: the
// definitions' order and reset_tools' schema, and a fresh session.

func defsWith(gs ...group) *definitions {
	d := newDefinitions(nil, slog.New(slog.DiscardHandler))
	for _, g := range gs {
		d.groups.Put(g.def.Name, g.rev, newGroup(g.def, g.rev, g.order))
	}
	return d
}

func meta(name string, order int64) group {
	return group{def: bus.Group{Name: name, Scope: bus.ScopeMeta, Description: name + " tools"}, order: order, rev: uint64(order)}
}

func TestDefinitionsOrder(t *testing.T) {
	ext := group{def: bus.Group{Name: "ext", Scope: bus.ScopeExternal}, order: 2, rev: 9}
	for _, tc := range []struct {
		name     string
		groups   []group
		want     []string // Groups, in order
		wantMeta []string
	}{
		{"none", nil, []string{}, nil},
		{"by registration time", []group{meta("b", 3), meta("a", 5), ext}, []string{"ext", "b", "a"}, []string{"b", "a"}},
		{"ties by name", []group{meta("z", 1), meta("y", 1)}, []string{"y", "z"}, []string{"y", "z"}},
		{"no order: the revision stands in", []group{{def: bus.Group{Name: "late", Scope: bus.ScopeMeta}, rev: 1}, meta("m", 7)}, []string{"late", "m"}, []string{"late", "m"}},
		{"external only", []group{ext}, []string{"ext"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := defsWith(tc.groups...)
			var got, gotMeta []string
			got = []string{}
			for _, g := range d.Groups() {
				got = append(got, g.Name)
			}
			for _, g := range d.metaGroups() {
				gotMeta = append(gotMeta, g.Name)
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(gotMeta, tc.wantMeta) {
				t.Fatalf("Groups %v meta %v, want %v and %v", got, gotMeta, tc.want, tc.wantMeta)
			}
			if d.hasMeta() != (len(tc.wantMeta) > 0) {
				t.Fatalf("hasMeta = %v with meta groups %v", d.hasMeta(), tc.wantMeta)
			}
			def, ok := d.resetDef()
			if ok != d.hasMeta() {
				t.Fatalf("resetDef offered %v, hasMeta %v", ok, d.hasMeta())
			}
			if ok {
				var sch struct {
					Properties json.RawMessage `json:"properties"`
				}
				if err := json.Unmarshal(def.InputSchema, &sch); err != nil {
					t.Fatal(err)
				}
				keys, _, err := orderedObject(sch.Properties, 0)
				if err != nil || !slices.Equal(keys, tc.wantMeta) {
					t.Fatalf("reset_tools properties %v (%v), want %v", keys, err, tc.wantMeta)
				}
			}
		})
	}
}

func TestDefinitionsOlderRevisionIgnored(t *testing.T) {
	d := defsWith(meta("a", 5))
	d.groups.Put("a", 4, newGroup(bus.Group{Name: "a", Scope: bus.ScopeMeta, Description: "older"}, 4, 5))
	if g, _ := d.Group("a"); g.Description != "a tools" {
		t.Fatalf("an older revision replaced the group: %+v", g)
	}
	d.groups.Put("a", 6, newGroup(bus.Group{Name: "a", Scope: bus.ScopeMeta, Description: "newer"}, 6, 5))
	if g, _ := d.Group("a"); g.Description != "newer" {
		t.Fatalf("a newer revision was not taken: %+v", g)
	}
}

func TestFreshSessionFromDefinitions(t *testing.T) {
	on := meta("on", 1)
	on.def.ActiveByDefault = true
	for _, tc := range []struct {
		name   string
		cfg    Config
		groups []group
		active []string
	}{
		{"defaults", Config{Session: session.Config{DefaultMode: "default"}}, nil, []string{}},
		{"active by default", Config{Session: session.Config{DefaultMode: "plan"}}, []group{meta("off", 0), on}, []string{"on"}},
		{"rules and dirs", Config{Session: session.Config{DefaultMode: "default", DefaultRules: []bus.Rule{{Tool: "x", Behavior: "allow"}}, DefaultWorkDirs: []string{"/w"}}}, nil, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Session.CacheSize = 4
			s := session.NewStore(nil, sessionConfig(tc.cfg, defsWith(tc.groups...)))
			got := s.Session("never-seen")
			if !slices.Equal(got.Active, tc.active) || got.Mode != tc.cfg.Session.DefaultMode ||
				!slices.Equal(got.Rules, tc.cfg.Session.DefaultRules) || !slices.Equal(got.WorkDirs, tc.cfg.Session.DefaultWorkDirs) {
				t.Fatalf("fresh session %+v, want active %v under %+v", got, tc.active, tc.cfg)
			}
			if got.Revision() != 0 || s.Stored("never-seen") || s.Sessions() != 0 {
				t.Fatalf("a fresh session counts as stored")
			}
			if len(tc.cfg.Session.DefaultRules) > 0 {
				got.Rules[0].Tool = "changed"
				if s.Session("never-seen").Rules[0].Tool != "x" {
					t.Fatal("a fresh session shares the default rules")
				}
			}
		})
	}
}
