package router

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/schemas"
	"github.com/toolbus/toolbus/store"
)

// resolveStep finds what each call of a batch runs and validates its
// input, against the session as the run's snapshot left it in the cache.
type resolveStep struct {
	tools  resolverPort
	health *store.Health // an unavailable tool while the store is full says so
	log    *slog.Logger
}

// from resolves the calls of b from index i on that have no result yet; an
// unknown or unavailable tool is read from KV and resolved again (another
// router may have just acknowledged its registration).
func (s resolveStep) from(b *batch, i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sess := b.p.sessions.Session(b.session)
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
	sess = b.p.sessions.Session(b.session)
	for _, c := range b.calls[i:] {
		if c.result == nil && slices.Contains(missing, c.call.Name) {
			s.one(b, sess, c)
		}
	}
}

// one finds what c runs and validates its input; a call that cannot run
// gets its early result.
func (s resolveStep) one(b *batch, sess *groups.Session, c *callState) {
	c.target = s.tools.resolve(sess, b.req, b.data.User, c.call.Name)
	c.input, c.early = validate(c.call, c.target)
	if c.early != nil && c.target.Code == bus.CodeUnavailable && s.health != nil {
		c.early = storeFullOr(c.call, s.health, c.early)
	}
}

// validate checks a resolved call's input against its tool's schema: the
// input as the tool gets it, or the result of a call that cannot run.
func validate(c bus.Call, t groups.Resolved) (json.RawMessage, *bus.Result) {
	if t.Code != "" {
		return nil, ptr(bus.ErrorResult(c, t.Code, t.Message))
	}
	input, v, err := schemas.ParseInput(c.Input)
	if err != nil {
		d := bus.Detail{Path: "/", Message: err.Error()}
		return nil, ptr(bus.ErrorResult(c, bus.CodeInvalidInput, schemas.InvalidInputMessage(c.Name, []bus.Detail{d}), d))
	}
	var schema *schemas.Schema
	switch {
	case t.Tool != nil:
		schema = t.Tool.Schema
	case t.External != nil:
		schema = t.External.Schema
	}
	if schema != nil {
		if problems := schema.Validate(v); len(problems) > 0 {
			return nil, ptr(bus.ErrorResult(c, bus.CodeInvalidInput, schemas.InvalidInputMessage(c.Name, problems), problems...))
		}
	}
	return input, nil
}

func ptr[T any](v T) *T { return &v }

// parkSpec says how a call parks; the zero value means it runs.
type parkSpec struct {
	kind          string
	requestScoped bool
	reason        string // why it asks
	rule          string // why the engine decided as it did: the audit record's rule
	suggested     []bus.Rule
}

// decide applies the permission engine to a resolved, validated call: a
// result for a denied call, a parkSpec for one that waits, or neither.
// Built-ins and request-scoped external tools are never asked about.
func decide(pc permission.Context, t groups.Resolved, c bus.Call, input json.RawMessage) (parkSpec, *bus.Result) {
	switch {
	case t.Reset, t.Skill, t.Search, t.Read:
		return parkSpec{}, nil
	case t.External != nil:
		return parkSpec{kind: bus.KindExternal, requestScoped: true}, nil
	}
	def := &t.Tool.Def
	d := permission.Decide(pc, def, input)
	switch d.Behavior {
	case permission.Deny:
		return parkSpec{rule: d.Reason}, ptr(bus.ErrorResult(c, bus.CodeDenied,
			fmt.Sprintf("PermissionDeniedError: The tool '%s' may not run: %s.", def.Name, d.Reason)))
	case permission.Ask:
		return parkSpec{kind: bus.KindConfirm, reason: d.Reason, rule: d.Reason, suggested: d.SuggestedRules}, nil
	}
	if def.External {
		return parkSpec{kind: bus.KindExternal, rule: d.Reason}, nil
	}
	return parkSpec{rule: d.Reason}, nil
}

func permissionContext(s *groups.Session) permission.Context {
	return permission.Context{Mode: s.Mode, Rules: s.Rules, WorkDirs: s.WorkDirs}
}

// nextRun returns the end of the run that starts at call i (docs/protocol.md
// 5.2): a maximal stretch of concurrency-safe calls, or one unsafe call. A
// reset_tools call or a skill load changes what later calls resolve to, so
// the plan is made one run at a time.
func nextRun(i, n int, safe func(k int) bool) int {
	j := i + 1
	if safe(i) {
		for j < n && safe(j) {
			j++
		}
	}
	return j
}

// Unknown names the configuration's unknown pinned, quota and group names
// as they are now (groups.Store.Unknown; docs/protocol.md 9): cmd/router
// warns of them once its built-in tools are registered.
func (r *Router) Unknown() []string { return r.groups.Unknown(r.reg) }
