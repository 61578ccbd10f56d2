package session

import "testing"

// TestCanSkip is the rule of docs/protocol.md 4.2 for skipping a batch's
// session read.
func TestCanSkip(t *testing.T) {
	for _, tc := range []struct {
		asked, have uint64
		current     bool
		want        bool
	}{
		{0, 9, true, false},  // no sessionrev: read as before
		{5, 9, true, true},   // cache newer than the agent's revision
		{9, 9, true, true},   // equal
		{10, 9, true, false}, // the agent saw a write this router has not
		{5, 9, false, false}, // the watch saw a newer write
		{5, 0, true, false},  // not cached
	} {
		if got := canSkip(tc.asked, tc.have, tc.current); got != tc.want {
			t.Errorf("canSkip(%d, %d, %v) = %v, want %v", tc.asked, tc.have, tc.current, got, tc.want)
		}
	}
}

// TestSessionCacheWatch: what the watch delivers makes cached sessions
// stale; past its bound every older cached session counts as stale.
func TestSessionCacheWatch(t *testing.T) {
	c := &Revisions{newer: map[string]uint64{}, limit: 2, ready: true}
	if !c.current("a", 3) {
		t.Fatal("nothing seen: current")
	}
	c.seen("a", 5)
	if c.current("a", 3) || !c.current("a", 5) || !c.current("b", 1) {
		t.Fatal("a write of a at 5 must make a@3 stale, and only it")
	}
	c.seen("b", 6)
	c.seen("c", 7) // past the bound: floor 6
	if c.current("a", 5) || c.current("b", 5) || !c.current("b", 6) || !c.current("c", 7) || c.current("c", 6) {
		t.Fatalf("after the overflow: floor %d, newer %v", c.floor, c.newer)
	}
	c.ready = false
	if c.current("c", 7) {
		t.Fatal("without a watch nothing is current")
	}
}

// TestMissCurrent: a session read absent is served its defaults to a
// batch echoing the revision of the miss while no write of it arrived,
// and only then (docs/protocol.md 4.2).
func TestMissCurrent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(c *Revisions)
		asked  uint64
		want   bool
		revNow uint64 // what a reply would carry
	}{
		{"never read", func(*Revisions) {}, 10, false, 0},
		{"read absent", func(c *Revisions) { c.miss("a", 10) }, 10, true, 10},
		{"no sessionrev", func(c *Revisions) { c.miss("a", 10) }, 0, false, 10},
		{"older revision", func(c *Revisions) { c.miss("a", 10) }, 4, true, 10},
		{"a write the watch has not delivered", func(c *Revisions) { c.miss("a", 10) }, 11, false, 10},
		{"a write of another session", func(c *Revisions) { c.miss("a", 10); c.seen("b", 12) }, 12, true, 12},
		{"a write of it since", func(c *Revisions) { c.miss("a", 10); c.seen("a", 11) }, 11, false, 0},
		{"a write of it before the read", func(c *Revisions) { c.seen("a", 9); c.miss("a", 10) }, 10, true, 10},
		{"the watch overflowed since", func(c *Revisions) { c.miss("a", 10); c.seen("b", 11); c.seen("c", 12); c.seen("d", 13) }, 13, false, 0},
		{"the watch stopped", func(c *Revisions) { c.miss("a", 10); c.ready = false }, 10, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Revisions{newer: map[string]uint64{}, missed: map[string]uint64{}, limit: 2, ready: true, last: 10}
			tc.setup(c)
			if got := c.missCurrent("a", tc.asked); got != tc.want {
				t.Errorf("missCurrent(a, %d) = %v, want %v (newer %v, floor %d, last %d)", tc.asked, got, tc.want, c.newer, c.floor, c.last)
			}
			if got := c.missCurrent("a", c.last); (got && c.last != tc.revNow) || (!got && tc.revNow != 0) {
				t.Errorf("the reply's revision: current at %d = %v, want %d", c.last, got, tc.revNow)
			}
		})
	}
}
