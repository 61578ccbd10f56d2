package groups_test

import (
	"testing"

	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/session"
)

func TestLoadAndRefresh(t *testing.T) {
	st := newStore(t)
	writer := start(t, st, groups.Config{})
	reader := start(t, st, groups.Config{Session: session.Config{DefaultMode: "explore"}})

	// A session never stored loads as a fresh one.
	sess, err := reader.Load(t.Context(), "s1")
	if err != nil || sess.Revision() != 0 || sess.Mode != "explore" {
		t.Fatalf("Load of a new session: %+v, %v", sess, err)
	}
	if got := reader.Refresh(t.Context(), "s1"); got.Revision() != 0 || reader.Stored("s1") {
		t.Fatalf("Refresh of a new session: %+v", got)
	}

	// What another store wrote is read from KV at once, whatever the cache holds.
	for i := range 3 {
		w, err := writer.Update(t.Context(), "s1", func(s *groups.Session) error {
			s.Active = append(s.Active, "g"+string(rune('a'+i)))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := reader.Load(t.Context(), "s1")
		if err != nil || got.Revision() != w.Revision() || len(got.Active) != i+1 {
			t.Fatalf("Load after write %d: %+v, %v; want revision %d", i, got, err, w.Revision())
		}
		r := reader.Refresh(t.Context(), "s1")
		if r.Revision() < w.Revision() || len(r.Active) != i+1 {
			t.Fatalf("Refresh after write %d: %+v", i, r)
		}
		// Refresh also updates the cache.
		if c := reader.Session("s1"); c.Revision() < w.Revision() || !reader.Stored("s1") {
			t.Fatalf("cache after Refresh: %+v", c)
		}
	}

	// A corrupt record is an error for Load; Refresh falls back to the cache.
	if _, err := st.Sessions.Put(t.Context(), "bad", []byte("{")); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Load(t.Context(), "bad"); err == nil {
		t.Fatal("Load of a corrupt session succeeded")
	}
	if got := reader.Refresh(t.Context(), "bad"); got == nil {
		t.Fatal("Refresh returned nil")
	}
}

func TestSessionCacheIsBounded(t *testing.T) {
	st := newStore(t)
	s := start(t, st, groups.Config{Session: session.Config{CacheSize: 3, DefaultMode: "explore"}})
	for _, id := range []string{"a", "b", "c", "d"} {
		if _, err := s.Update(t.Context(), id, func(x *groups.Session) error { x.Mode = "bypass"; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Sessions(); n != 3 {
		t.Fatalf("the cache holds %d sessions, want 3", n)
	}
	// The least recently used one left the cache, not the bucket: a read
	// from KV brings it back.
	if s.Stored("a") || s.Session("a").Mode != "explore" {
		t.Fatalf("session a is still cached: %+v", s.Session("a"))
	}
	if got := s.Refresh(t.Context(), "a"); got.Mode != "bypass" || got.Revision() == 0 {
		t.Fatalf("Refresh of an evicted session: %+v", got)
	}
	if !s.Stored("a") || s.Stored("b") {
		t.Fatal("Refresh did not cache a in place of the least recently used b")
	}
}
