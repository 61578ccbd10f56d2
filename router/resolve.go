package router

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/store"
)

// resolveStep finds what each call of a batch runs and validates its
// input, against the session as the run's snapshot left it in the cache.
type resolveStep struct {
	tools  resolverPort
	health *store.Health // an unavailable tool while the store is full says so
	log    *slog.Logger
}

// from resolves the calls of b from index i on that have no result yet. A
// call that resolves to an unknown or unavailable tool is resolved again
// after the tool is read from KV: its registration may have been
// acknowledged through another router a moment ago.
func (s resolveStep) from(b *batch, i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sess := b.p.sessions.session(b.session)
	var missing []string
	for _, c := range b.calls[i:] {
		if c.result == nil {
			s.one(b, sess, c)
			if code := c.target.Code; (code == bus.CodeUnknownTool || code == bus.CodeUnavailable) &&
				bus.ValidName(c.call.Name) && !slices.Contains(missing, c.call.Name) {
				missing = append(missing, c.call.Name)
			}
		}
	}
	if len(missing) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	for _, name := range missing {
		if err := s.tools.refresh(ctx, name); err != nil {
			s.log.Warn("router: tool not read from KV", "tool", name, "err", err)
		}
	}
	sess = b.p.sessions.session(b.session)
	for _, c := range b.calls[i:] {
		if c.result == nil && slices.Contains(missing, c.call.Name) {
			s.one(b, sess, c)
		}
	}
}

// one finds what c runs and validates its input; a call that cannot run
// gets its early result, reported when its run comes.
func (s resolveStep) one(b *batch, sess *groups.Session, c *callState) {
	c.target = s.tools.resolve(sess, b.req, b.data.User, c.call.Name)
	c.input, c.early = validate(c.call, c.target)
	if c.early != nil && c.target.Code == bus.CodeUnavailable && s.health != nil {
		c.early = storeFullOr(c.call, s.health, c.early)
	}
}
