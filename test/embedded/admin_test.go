package embedded

import (
	"errors"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
)

// The delete verbs of docs/protocol.md 9: tools.delete, groups.delete, session.delete.
func TestAdminDeleteVerbs(t *testing.T) {
	e := groupEnv(t, 1)
	c := e.client

	// tools.delete removes an external tool's definition; it is then unknown.
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	if got := toolNames(t, c, "a1", nil); !slices.Contains(got, "ext") {
		t.Fatalf("ext not listed: %v", got)
	}
	if err := c.Admin(t.Context(), "tools.delete", "", map[string]string{"name": "ext"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := toolNames(t, c, "a1", nil); slices.Contains(got, "ext") {
		t.Fatalf("ext still listed after tools.delete: %v", got)
	}
	wantText(t, call1(t, c, "a1", "ext", `{}`), "error", bus.CodeUnknownTool, "ToolNotFoundError: The tool named 'ext' doesn't exist.")
	if err := c.Admin(t.Context(), "tools.delete", "", map[string]string{"name": "bad name"}, nil); !errors.Is(err, bus.ErrBadRequest) {
		t.Fatalf("tools.delete with a bad name: %v", err)
	}

	// groups.delete: the group leaves reset_tools' schema and the listing.
	if err := c.Admin(t.Context(), "groups.delete", "", map[string]string{"name": "web"}, nil); err != nil {
		t.Fatal(err)
	}
	list, err := c.Tools(t.Context(), "a1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range list.Groups {
		if g.Name == "web" {
			t.Fatal("web still listed after groups.delete")
		}
	}
	wantText(t, call1(t, c, "a1", "reset_tools", `{"web": true}`), "error", bus.CodeInvalidInput,
		"Invalid group name(s): web. The current available groups are: ops")

	// session.delete forgets the session's activation.
	if r := call1(t, c, "a2", "reset_tools", `{"ops": true}`); r.State != "success" {
		t.Fatal(textOf(r))
	}
	if err := c.Admin(t.Context(), "session.delete", "a2", nil, nil); err != nil {
		t.Fatal(err)
	}
	var v struct {
		Stored bool           `json:"stored"`
		State  groups.Session `json:"state"`
	}
	if err := c.Admin(t.Context(), "session.get", "a2", nil, &v); err != nil {
		t.Fatal(err)
	}
	if v.Stored || slices.Contains(v.State.Active, "ops") {
		t.Fatalf("session after session.delete: %+v", v)
	}
	wantText(t, call1(t, c, "a2", "deploy", `{}`), "error", bus.CodeInactiveTool, inactiveDeploy)
	if err := c.Admin(t.Context(), "session.delete", "", nil, nil); !errors.Is(err, bus.ErrBadRequest) {
		t.Fatalf("session.delete without sessionid: %v", err)
	}
}
