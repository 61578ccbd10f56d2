package facade

import (
	"context"
	"time"

	"github.com/mark3labs/mcp-go/server"
)

// Calm lists (docs/mcp.md "Calm lists"): a change of a session's listing
// that a watch or the poll found is applied (SetTools, which notifies the
// server's clients) on the trailing edge: Calm after the last change and
// after the previous notification, at most MaxCalm after the burst began.
// A host's own tools/list (and a new session's first listing) applies a
// pending change at once: the host never reads a stale list.

// Calm and MaxCalm bound the coalescing of list changes.
const (
	Calm    = 250 * time.Millisecond
	MaxCalm = time.Second
)

// calm is a session's change not yet applied. Guarded by session.mu.
type calm struct {
	tools   []server.ServerTool
	order   map[string]int
	pending bool
	first   time.Time   // the first change not yet applied
	last    time.Time   // when a change was last applied (a notification sent)
	timer   *time.Timer // applies the pending change
	applied string      // the listing the MCP server has (session.raw when set)
	sent    int         // notifications sent, for the tests
}

type laterKey struct{}

func later(ctx context.Context) context.Context { return context.WithValue(ctx, laterKey{}, true) }

func isLater(ctx context.Context) bool { v, _ := ctx.Value(laterKey{}).(bool); return v }

// applyLocked takes a changed listing: at once, or, when ctx was made by
// later, on the trailing edge of its burst.
func (s *session) applyLocked(ctx context.Context, tools []server.ServerTool, order map[string]int) {
	c := &s.calm
	c.tools, c.order = tools, order
	now := time.Now()
	if s.raw == c.applied && c.sent > 0 {
		// Back to what the hosts have: nothing to tell them.
		c.pending = false
		if c.timer != nil {
			c.timer.Stop()
		}
		return
	}
	if !isLater(ctx) {
		s.setLocked(now)
		return
	}
	if !c.pending {
		c.pending, c.first = true, now
	}
	due := laterTime(now.Add(Calm), c.last.Add(Calm))
	if cap := laterTime(c.first.Add(MaxCalm), c.last.Add(Calm)); due.After(cap) {
		due = cap
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(time.Until(due), s.applyPending)
		return
	}
	c.timer.Reset(time.Until(due))
}

func laterTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// setLocked replaces the MCP server's tools with the pending listing.
func (s *session) setLocked(now time.Time) {
	c := &s.calm
	if c.timer != nil {
		c.timer.Stop()
	}
	c.pending, c.last, c.applied = false, now, s.raw
	s.order = c.order
	s.mcp.SetTools(c.tools...)
	c.sent++
}

func (s *session) applyPending() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.calm.pending || s.ctx.Err() != nil {
		return
	}
	s.setLocked(time.Now())
}

// flush applies a pending change at once.
func (s *session) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calm.pending {
		s.setLocked(time.Now())
	}
}
