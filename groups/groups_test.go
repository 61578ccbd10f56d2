package groups_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/session"
	"github.com/toolbus/toolbus/store"
)

const bound = 10 * time.Second

// newStore starts a server and creates the buckets of the default prefix.
func newStore(t *testing.T) *store.Store {
	t.Helper()
	nc := testkit.Connect(t, testkit.RunServer(t))
	js := testkit.JetStream(t, nc)
	st, err := store.Setup(t.Context(), js, bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// start returns a started groups Store, stopped when the test ends.
func start(t *testing.T, st *store.Store, cfg groups.Config) *groups.Store {
	t.Helper()
	s := groups.New(st, cfg)
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, s.Stop)
	return s
}

func put(t *testing.T, s *groups.Store, gs ...bus.Group) {
	t.Helper()
	for _, g := range gs {
		if err := s.Put(t.Context(), g); err != nil {
			t.Fatalf("put %s: %v", g.Name, err)
		}
	}
}

func meta(name, desc string) bus.Group {
	return bus.Group{Name: name, Description: desc, Scope: bus.ScopeMeta}
}

func groupNames(gs []bus.Group) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Name)
	}
	return out
}

func TestPutDeleteGroups(t *testing.T) {
	st := newStore(t)
	s := start(t, st, groups.Config{})
	put(t, s, meta("web", "Web."), bus.Group{Name: "ops", Description: "Ops.", Scope: bus.ScopeExternal}, meta("db", "Databases."))
	if got := groupNames(s.Groups()); !slices.Equal(got, []string{"web", "ops", "db"}) {
		t.Fatalf("Groups %v, want registration order [web ops db]", got)
	}
	// An empty scope means meta.
	put(t, s, bus.Group{Name: "files", Description: "Files."})
	if g, ok := s.Group("files"); !ok || g.Scope != bus.ScopeMeta {
		t.Fatalf("files: %+v %v", g, ok)
	}
	// Changing a group keeps its place; putting it unchanged writes nothing.
	put(t, s, meta("web", "The web."))
	if got := groupNames(s.Groups()); !slices.Equal(got, []string{"web", "ops", "db", "files"}) {
		t.Fatalf("Groups after an update %v", got)
	}
	if g, _ := s.Group("web"); g.Description != "The web." {
		t.Fatalf("web after update: %+v", g)
	}
	e1, err := st.Groups.Get(t.Context(), "web")
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, meta("web", "The web."))
	if e2, _ := st.Groups.Get(t.Context(), "web"); e2.Revision() != e1.Revision() {
		t.Fatalf("an unchanged put wrote revision %d → %d", e1.Revision(), e2.Revision())
	}
	// Delete removes it from the cache and KV; deleting twice is fine.
	for range 2 {
		if err := s.Delete(t.Context(), "ops"); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := s.Group("ops"); ok {
		t.Fatal("deleted group still defined")
	}
	if _, err := st.Groups.Get(t.Context(), "ops"); !store.IsNotFound(err) {
		t.Fatalf("deleted group in KV: %v", err)
	}
	// A group defined again goes last.
	put(t, s, bus.Group{Name: "ops", Scope: bus.ScopeExternal})
	if got := groupNames(s.Groups()); !slices.Equal(got, []string{"web", "db", "files", "ops"}) {
		t.Fatalf("Groups after delete and put %v", got)
	}
	// Another store sees the groups after Start, and later changes.
	// (Its order is checked in TestGroupOrderSeenByLaterStore.)
	other := start(t, st, groups.Config{})
	for _, n := range []string{"web", "db", "files", "ops"} {
		if g, ok := other.Group(n); !ok || !g.Equal(func() bus.Group { g, _ := s.Group(n); return g }()) {
			t.Fatalf("other store has %s = %+v, %v", n, g, ok)
		}
	}
	put(t, s, meta("late", "Late."))
	if err := s.Delete(t.Context(), "files"); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		_, late := other.Group("late")
		_, files := other.Group("files")
		if !late || files {
			return fmt.Errorf("other store: late %v, files %v", late, files)
		}
		return nil
	})
}

// TestPutAfterDelete deletes a group and defines it again at once: the
// definition must be stored again. The race it looks for is narrow, so it
// tries many times; it passes when the race did not happen.
func TestPutAfterDelete(t *testing.T) {
	st := newStore(t)
	s := start(t, st, groups.Config{})
	for i := range 100 {
		g := meta(fmt.Sprint("g", i), "G.")
		put(t, s, g)
		if err := s.Delete(t.Context(), g.Name); err != nil {
			t.Fatal(err)
		}
		put(t, s, g)
		if _, err := st.Groups.Get(t.Context(), g.Name); err != nil {
			t.Fatalf("group %s was put again after Delete but is not in the groups bucket (%v, attempt %d): a late delivery of the first put must not undo the delete", g.Name, err, i)
		}
	}
}

func TestGroupOrderSeenByLaterStore(t *testing.T) {
	st := newStore(t)
	s := start(t, st, groups.Config{})
	put(t, s, meta("a", "A."), meta("b", "B."), meta("c", "C."))
	put(t, s, meta("a", "A, updated."))
	if got := groupNames(s.Groups()); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("running store order %v", got)
	}
	later := start(t, st, groups.Config{})
	if got := groupNames(later.Groups()); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("a store started after group a was updated lists %v, the running one [a b c]: order is the revision the cache "+
			"first saw (groups.go putGroup: order := rev) and the bucket keeps only the latest one, so two routers build "+
			"reset_tools with different property orders and list groups differently (docs/protocol.md 4.2: registration order)", got)
	}
}

func TestCheckGroup(t *testing.T) {
	st := newStore(t)
	s := start(t, st, groups.Config{})
	for _, tc := range []struct {
		name string
		g    bus.Group
		ok   bool
	}{
		{"meta", meta("web", "Web."), true},
		{"external", bus.Group{Name: "ops", Scope: bus.ScopeExternal}, true},
		{"basic", bus.Group{Name: bus.GroupBasic, Scope: bus.ScopeMeta}, false},
		{"basic scope", bus.Group{Name: "x", Scope: bus.ScopeBasic}, false},
		{"unknown scope", bus.Group{Name: "x", Scope: "global"}, false},
		{"no scope", bus.Group{Name: "x"}, false}, // Put defaults it, CheckGroup does not
		{"bad name", bus.Group{Name: "a.b", Scope: bus.ScopeMeta}, false},
		{"empty name", bus.Group{Scope: bus.ScopeMeta}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := groups.CheckGroup(&tc.g)
			if tc.ok != (err == nil) {
				t.Fatalf("CheckGroup: %v", err)
			}
			if err != nil {
				if !errors.Is(err, bus.ErrBadRequest) || err.(*bus.Error).Message == "" {
					t.Fatalf("error %v, want bad_request with a message", err)
				}
			}
		})
	}
	// basic cannot be defined through Put either.
	err := s.Put(t.Context(), bus.Group{Name: bus.GroupBasic, Description: "Mine."})
	if !errors.Is(err, bus.ErrBadRequest) {
		t.Fatalf("Put basic: %v", err)
	}
	if _, err := st.Groups.Get(t.Context(), bus.GroupBasic); !store.IsNotFound(err) {
		t.Fatalf("basic stored: %v", err)
	}
	if len(s.Groups()) != 0 {
		t.Fatalf("Groups %v", s.Groups())
	}
}

func TestBadGroupEntryIgnored(t *testing.T) {
	st := newStore(t)
	for k, v := range map[string]string{
		"junk":  "not json",
		"basic": `{"name":"basic","scope":"meta"}`,
		"noscp": `{"name":"noscp"}`,
	} {
		if _, err := st.Groups.Put(t.Context(), k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	s := start(t, st, groups.Config{})
	if len(s.Groups()) != 0 {
		t.Fatalf("bad entries loaded: %v", s.Groups())
	}
}

func TestFreshSession(t *testing.T) {
	st := newStore(t)
	rules := []bus.Rule{{Tool: "bash", Pattern: "git *", Behavior: "allow"}}
	s := start(t, st, groups.Config{Session: session.Config{DefaultMode: "explore", DefaultRules: rules, DefaultWorkDirs: []string{"/src"}}})
	put(t, s, meta("web", "Web."), bus.Group{Name: "db", Scope: bus.ScopeMeta, ActiveByDefault: true},
		bus.Group{Name: "ops", Scope: bus.ScopeExternal, ActiveByDefault: true})
	sess := s.Session("never-seen")
	if !slices.Equal(sess.Active, []string{"db", "ops"}) || sess.Mode != "explore" || !slices.Equal(sess.Rules, rules) ||
		!slices.Equal(sess.WorkDirs, []string{"/src"}) || sess.Revision() != 0 {
		t.Fatalf("fresh session %+v", sess)
	}
	if !sess.IsActive(bus.GroupBasic) || !sess.IsActive("db") || sess.IsActive("web") {
		t.Fatalf("IsActive wrong for %+v", sess.Active)
	}
	if s.Stored("never-seen") {
		t.Fatal("a fresh session counts as stored")
	}
	// The default mode is "default".
	d := start(t, st, groups.Config{})
	if m := d.Session("x").Mode; m != "default" {
		t.Fatalf("default mode %q", m)
	}
	// A fresh session is private: changing it changes no later one.
	sess.Rules[0].Tool = "changed"
	if s.Session("other").Rules[0].Tool != "bash" {
		t.Fatal("fresh sessions share the default rules slice")
	}
}

func TestUpdate(t *testing.T) {
	st := newStore(t)
	s := start(t, st, groups.Config{})
	put(t, s, bus.Group{Name: "db", Scope: bus.ScopeMeta, ActiveByDefault: true})
	sess, err := s.Update(t.Context(), "s1", func(sess *groups.Session) error {
		if !slices.Equal(sess.Active, []string{"db"}) {
			return fmt.Errorf("update of a new session starts from %v", sess.Active)
		}
		sess.Mode = "bypass"
		sess.State = json.RawMessage(`{"n":1}`)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sess.Revision() == 0 || sess.Mode != "bypass" || sess.Updated.IsZero() || !s.Stored("s1") {
		t.Fatalf("after update %+v", sess)
	}
	if got := s.Session("s1"); got.Mode != "bypass" || got.Revision() != sess.Revision() {
		t.Fatalf("cache %+v", got)
	}
	// An error leaves the session as it is.
	for _, stop := range []error{groups.ErrAbort, errors.New("no")} {
		_, err := s.Update(t.Context(), "s1", func(sess *groups.Session) error {
			sess.Mode = "dont_ask"
			return stop
		})
		if !errors.Is(err, stop) {
			t.Fatalf("Update error %v, want %v", err, stop)
		}
	}
	e, err := st.Sessions.Get(t.Context(), "s1")
	if err != nil || e.Revision() != sess.Revision() {
		t.Fatalf("an aborted update wrote: %v", err)
	}
	if s.Session("s1").Mode != "bypass" {
		t.Fatal("an aborted update changed the cache")
	}
	// A corrupt record is replaced, not propagated.
	if _, err := st.Sessions.Put(t.Context(), "bad", []byte("{")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Update(t.Context(), "bad", func(sess *groups.Session) error { sess.Mode = "explore"; return nil })
	if err != nil || got.Mode != "explore" {
		t.Fatalf("update of a corrupt session: %+v %v", got, err)
	}
	// DeleteSession forgets it.
	if err := s.DeleteSession(t.Context(), "s1"); err != nil {
		t.Fatal(err)
	}
	if s.Stored("s1") || s.Session("s1").Mode != "default" {
		t.Fatal("session survived DeleteSession")
	}
	if err := s.DeleteSession(t.Context(), "s1"); err != nil {
		t.Fatalf("second DeleteSession: %v", err)
	}
}

func TestUpdateConcurrentNeverLoses(t *testing.T) {
	st := newStore(t)
	stores := []*groups.Store{start(t, st, groups.Config{}), start(t, st, groups.Config{})}
	const writers = 20
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	begin := make(chan struct{})
	for i := range writers {
		wg.Go(func() {
			<-begin
			_, err := stores[i%2].Update(ctx, "shared", func(sess *groups.Session) error {
				sess.Rules = append(sess.Rules, bus.Rule{Tool: fmt.Sprint("t", i)})
				return nil
			})
			errs <- err
		})
	}
	close(begin)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("update: %v", err)
		}
	}
	want := make([]string, writers)
	for i := range want {
		want[i] = fmt.Sprint("t", i)
	}
	check := func(sess *groups.Session) error {
		var got []string
		for _, r := range sess.Rules {
			got = append(got, r.Tool)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			return fmt.Errorf("%d rules %v, want all %d appends", len(got), got, writers)
		}
		return nil
	}
	e, err := st.Sessions.Get(t.Context(), "shared")
	if err != nil {
		t.Fatal(err)
	}
	var stored groups.Session
	if err := json.Unmarshal(e.Value(), &stored); err != nil {
		t.Fatal(err)
	}
	if err := check(&stored); err != nil {
		t.Fatalf("KV: %v", err)
	}
	// Both stores read the last write (sessions are read from KV, not
	// watched), and keep it in their caches.
	for i, s := range stores {
		for _, sess := range []*groups.Session{s.Refresh(t.Context(), "shared"), s.Session("shared")} {
			if sess.Revision() != e.Revision() {
				t.Fatalf("store %d at revision %d, want %d", i, sess.Revision(), e.Revision())
			}
			if err := check(sess); err != nil {
				t.Fatalf("store %d: %v", i, err)
			}
		}
	}
}

func TestStartEndsWithContext(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s := groups.New(st, groups.Config{})
	if err := s.Start(ctx); err == nil {
		t.Error("Start with an ended context succeeded")
	}
	s.Stop(t.Context())
	s.Stop(t.Context())
}

func TestTouchKeepsUsedSessionsAlive(t *testing.T) {
	st := newStore(t)
	s := start(t, st, groups.Config{Session: session.Config{IdleTTL: 2 * time.Second}})
	if err := s.Touch(t.Context(), "never"); err != nil {
		t.Fatal(err)
	}
	if s.Stored("never") {
		t.Fatal("touch created a session")
	}
	first, err := s.Update(t.Context(), "used", func(x *groups.Session) error { x.Mode = "explore"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Touch(t.Context(), "used"); err != nil {
		t.Fatal(err)
	}
	if got := s.Session("used").Revision(); got != first.Revision() {
		t.Fatal("a fresh session was rewritten")
	}
	testkit.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if err := s.Touch(t.Context(), "used"); err != nil {
			return err
		}
		if s.Session("used").Revision() == first.Revision() {
			return fmt.Errorf("not touched yet")
		}
		return nil
	})
	if s.Session("used").Mode != "explore" {
		t.Fatal("touch changed the session")
	}
}
