package router

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/schemas"
)

// toolsLister answers P.tools.<session> (docs/protocol.md 4.1).
type toolsLister struct {
	*wire
	base     context.Context
	reg      *registry.Registry
	groups   *groups.Store
	skills   *routerSkills
	identify func(session string, claimed json.RawMessage) (json.RawMessage, error)
	// refused records a refused query in the audit trail (refused.go).
	refused func(m *nats.Msg, e *bus.Event, err error)
	readOut bool // read_output is offered (Guard.ReadOutput)
}

func (r *toolsLister) onTools(m *nats.Msg) {
	e, err := r.decode(m, "tools", bus.TypeToolsQuery)
	var q bus.ToolsQuery
	if err == nil && len(e.Data) > 0 {
		err = e.DataAs(&q)
	}
	if err == nil {
		q.User, err = r.identify(e.SessionID, q.User)
	}
	var list *bus.ToolsList
	if err == nil {
		list, err = r.list(e.SessionID, q)
	}
	if err != nil {
		if r.refused != nil {
			r.refused(m, e, err)
		}
		r.reject(m, err)
		return
	}
	r.respond(m, bus.TypeToolsList, list, "tools reply")
}

// list builds the tool list a session's model sees.
func (r *toolsLister) list(session string, q bus.ToolsQuery) (*bus.ToolsList, error) {
	req, err := groups.CheckRequest(q.Request)
	if err != nil {
		return nil, err
	}
	// A listing reads the session from KV: it is once per model turn, and
	// it must reflect an activation made through any router.
	ctx, cancel := context.WithTimeout(r.base, 5*time.Second)
	defer cancel()
	view := r.groups.View(r.reg, r.groups.Refresh(ctx, session), req)
	defs, prompt := r.skills.listing(view, req, userOf(q.User), withReadOutput(r.readOut, req, view.Tools()))
	var (
		tools    []json.RawMessage
		deferred map[string]string
	)
	if q.Deferred {
		var ns []schemas.Namespace
		ns, deferred = view.Deferred()
		// The provider's tool search stands in for search_tools, which
		// stays callable (docs/protocol.md 4.1).
		defs = slices.DeleteFunc(defs, func(d bus.ToolDef) bool { return d.Name == groups.SearchTools })
		tools, err = schemas.ExportDeferred(q.Format, defs, ns)
	} else {
		tools, err = schemas.Export(q.Format, defs)
	}
	if err != nil {
		return nil, bus.Errorf(bus.CodeBadRequest, "%v", err)
	}
	return &bus.ToolsList{Tools: tools, Groups: view.Groups(), SkillsPrompt: prompt, SessionRev: view.Session().Revision(), Deferred: deferred}, nil
}
