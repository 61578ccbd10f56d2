package router

import (
	"context"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/permission"
)

// sessionView is the reply of session.get.
type sessionView struct {
	Session string          `json:"session"`
	Stored  bool            `json:"stored"`
	Groups  []bus.GroupInfo `json:"groups"`
	State   *groups.Session `json:"state"`
}

// adminGroups runs the group and session verbs.
func (r *Router) adminGroups(ctx context.Context, verb string, e *bus.Event) (any, error) {
	needSession := func() error {
		if e.SessionID == "" {
			return bus.Errorf(bus.CodeBadRequest, "%s needs the sessionid attribute", verb)
		}
		return nil
	}
	switch verb {
	case "groups.put":
		g, err := bus.DecodeGroup(e.Data)
		if err != nil {
			return nil, bus.Errorf(bus.CodeBadRequest, "groups.put wants a group definition: %s", strings.TrimPrefix(err.Error(), bus.CodeBadRequest+": "))
		}
		if err := r.groups.Put(ctx, g); err != nil {
			return nil, err
		}
		return map[string]any{"group": g.Name}, nil
	case "groups.delete":
		var d struct {
			Name string `json:"name"`
		}
		if err := e.DataAs(&d); err != nil || !bus.ValidName(d.Name) {
			return nil, bus.Errorf(bus.CodeBadRequest, "groups.delete wants {\"name\": <group name>}")
		}
		if err := r.groups.Delete(ctx, d.Name); err != nil {
			return nil, err
		}
		return map[string]any{"deleted": d.Name}, nil
	case "session.get":
		if err := needSession(); err != nil {
			return nil, err
		}
		// Read from KV: the answer must show every write acknowledged so far,
		// through whichever router.
		return r.sessionView(e.SessionID, r.groups.Refresh(ctx, e.SessionID)), nil
	case "session.delete":
		if err := needSession(); err != nil {
			return nil, err
		}
		if err := r.groups.DeleteSession(ctx, e.SessionID); err != nil {
			return nil, err
		}
		return map[string]any{"deleted": e.SessionID}, nil
	case "session.activate":
		if err := needSession(); err != nil {
			return nil, err
		}
		var d struct {
			Groups []string `json:"groups"`
			Active *bool    `json:"active"`
		}
		if err := e.DataAs(&d); err != nil || len(d.Groups) == 0 {
			return nil, bus.Errorf(bus.CodeBadRequest, "session.activate wants {\"groups\": [names], \"active\": true|false} (active defaults to true)")
		}
		if d.Active == nil {
			d.Active = new(true)
		}
		for _, name := range d.Groups {
			g, ok := r.groups.Group(name)
			if !ok {
				return nil, bus.Errorf(bus.CodeBadRequest, "group %q does not exist", name)
			}
			if g.Scope != bus.ScopeExternal {
				return nil, bus.Errorf(bus.CodeBadRequest, "group %q has scope %s; only external-scope groups are switched by operators (meta groups by reset_tools)", name, g.Scope)
			}
		}
		sess, err := r.groups.Update(ctx, e.SessionID, func(s *groups.Session) error {
			s.Active = slices.DeleteFunc(s.Active, func(g string) bool { return slices.Contains(d.Groups, g) })
			if *d.Active {
				s.Active = append(s.Active, d.Groups...)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		return r.sessionView(e.SessionID, sess), nil
	case "session.mode":
		if err := needSession(); err != nil {
			return nil, err
		}
		var d struct {
			Mode string `json:"mode"`
		}
		if err := e.DataAs(&d); err != nil || !permission.ValidMode(d.Mode) {
			return nil, bus.Errorf(bus.CodeBadRequest, "session.mode wants {\"mode\": \"default|accept_edits|explore|bypass|dont_ask\"}")
		}
		sess, err := r.groups.Update(ctx, e.SessionID, func(s *groups.Session) error {
			s.Mode = d.Mode
			return nil
		})
		if err != nil {
			return nil, err
		}
		return r.sessionView(e.SessionID, sess), nil
	case "status":
		return r.status(ctx), nil
	case "skills.list":
		return r.skillsList(), nil
	case "parked.list":
		recs := r.parked.Parked(e.SessionID, "")
		out := make([]bus.ParkedCall, len(recs))
		for i, rec := range recs {
			out[i] = bus.ParkedCall{Session: rec.Session, ReplyID: rec.ReplyID, ID: rec.Call.ID, Name: rec.Call.Name,
				Input: rec.Call.Input, InputDigest: rec.InputDigest, Kind: rec.Kind, Subject: rec.Subject, SuggestedRules: rec.SuggestedRules,
				Reason: rec.Reason, Created: rec.Created, Expires: rec.Expires}
		}
		return map[string]any{"parked": out}, nil
	}
	if out, ok, err := r.adminGuard(ctx, verb, e); ok {
		return out, err
	}
	return nil, bus.Errorf(bus.CodeBadRequest, "unknown admin verb %q", verb)
}

func (r *Router) sessionView(id string, sess *groups.Session) sessionView {
	return sessionView{Session: id, Stored: sess.Revision() != 0, Groups: r.groups.View(r.reg, sess, nil).Groups(), State: sess}
}

func (r *Router) status(ctx context.Context) bus.Status {
	live := r.reg.Workers()
	st := bus.Status{Router: r.cfg.ID, Tools: []bus.ToolStatus{}, Groups: len(r.groups.Groups()),
		Sessions: r.groups.Sessions(), Parked: len(r.parked.Parked("", "")), Store: bus.StoreStatus{State: "ok"}}
	// The sessions stored in KV, not only those this router holds decoded:
	// the bucket keeps one record per session (history 1).
	if kvs, err := r.store.Sessions.Status(ctx); err == nil {
		n := int(kvs.Values())
		st.SessionsStored = &n
	}
	if full, why, since := r.store.Health.Full(); full {
		st.Store = bus.StoreStatus{State: "full", Error: why, Since: &since}
	}
	for _, t := range r.reg.Tools() {
		g := t.Def.Groups
		if len(g) == 0 {
			g = []string{bus.GroupBasic} // where a tool without groups is (docs/protocol.md 7.2)
		}
		st.Tools = append(st.Tools, bus.ToolStatus{Name: t.Def.Name, LiveWorkers: live[t.Def.Name], External: t.Def.External, Groups: g})
	}
	return st
}
