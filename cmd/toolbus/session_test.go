package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

var testGroups = []bus.Group{
	{Name: "ops", Description: "Deploy and roll back.", Instructions: "Deploy to staging first.", Scope: bus.ScopeMeta},
	{Name: "web", Description: "Search the web.", Scope: bus.ScopeMeta},
	{Name: "admin", Description: "Operator tools.", Scope: bus.ScopeExternal},
}

// putGroups puts testGroups with the admin verb groups.put and waits until
// a session sees them.
func (d *deployment) putGroups(t *testing.T) {
	t.Helper()
	for _, g := range testGroups {
		if err := d.client.Admin(t.Context(), "groups.put", "", g, nil); err != nil {
			t.Fatal(err)
		}
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		list, err := d.client.Tools(t.Context(), "any", bus.FormatToolbus, nil)
		if err != nil {
			return err
		}
		if len(list.Groups) != len(testGroups)+1 {
			return fmt.Errorf("groups %+v", list.Groups)
		}
		return nil
	})
}

// groupsOf runs `groups --json` for session.
func groupsOf(t *testing.T, d *deployment, session string) map[string]bus.GroupInfo {
	t.Helper()
	out, _, err := exec(t.Context(), "groups", "--json", "--session", session, "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	var gs []bus.GroupInfo
	if err := json.Unmarshal([]byte(out), &gs); err != nil {
		t.Fatalf("groups --json: %v\n%s", err, out)
	}
	m := map[string]bus.GroupInfo{}
	for _, g := range gs {
		m[g.Name] = g
	}
	return m
}

func TestGroupsAndReset(t *testing.T) {
	d := newDeployment(t)
	d.putGroups(t)
	out, _, err := exec(t.Context(), "groups", "--session", "g1", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	want := `  [x] basic (basic) — Tools that are always available.
  [ ] ops (meta) — Deploy and roll back.
  [ ] web (meta) — Search the web.
  [ ] admin (external) — Operator tools.
`
	if out != want {
		t.Fatalf("groups:\n%s\nwant:\n%s", out, want)
	}

	out, _, err = exec(t.Context(), "reset", "ops", "--session", "g1", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	want = "The currently activated tool group(s): ops.\n<tool-instructions>\n" +
		"The tool instructions are a collection of suggestions, rules and notifications about how to use the tools in the activated groups.\n" +
		"<group name=\"ops\">Deploy to staging first.</group>\n</tool-instructions>\n"
	if out != want {
		t.Fatalf("reset ops:\n%s\nwant:\n%s", out, want)
	}
	if gs := groupsOf(t, d, "g1"); !gs["ops"].Active || gs["web"].Active || !gs["basic"].Active {
		t.Fatalf("groups after reset ops: %+v", gs)
	}
	// The input is the final set.
	out, _, err = exec(t.Context(), "reset", "web", "--session", "g1", "--nats", d.url)
	if err != nil || out != "The currently activated tool group(s): web.\n" {
		t.Fatalf("reset web: %v %q", err, out)
	}
	if gs := groupsOf(t, d, "g1"); gs["ops"].Active || !gs["web"].Active {
		t.Fatalf("groups after reset web: %+v", gs)
	}
	// Another session is untouched.
	if gs := groupsOf(t, d, "g2"); gs["web"].Active {
		t.Fatalf("groups of g2: %+v", gs)
	}
	out, _, err = exec(t.Context(), "reset", "--session", "g1", "--nats", d.url)
	if err != nil || out != "All tool groups are currently deactivated.\n" {
		t.Fatalf("reset: %v %q", err, out)
	}
	out, _, err = exec(t.Context(), "reset", "nope", "admin", "--session", "g1", "--nats", d.url)
	if err == nil || !strings.Contains(err.Error(), bus.CodeInvalidInput) {
		t.Fatalf("reset nope: %v", err)
	}
	if out != "Invalid group name(s): nope, admin. The current available groups are: ops, web\n" {
		t.Fatalf("reset nope output %q", out)
	}
	out, _, err = exec(t.Context(), "reset", "ops", "--json", "--session", "g1", "--nats", d.url)
	var res bus.Result
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.State != bus.StateSuccess || res.Name != "reset_tools" {
		t.Fatalf("reset --json: %v\n%s", err, out)
	}
}

func TestSessionShowModeActivate(t *testing.T) {
	d := newDeployment(t)
	d.putGroups(t)
	out, _, err := exec(t.Context(), "session", "show", "--session", "m1", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"session m1 (not stored yet: the defaults)\n", "mode: default\n", "groups:\n  [x] basic (basic)",
		"  [ ] admin (external) — Operator tools.\n", "rules: none\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("session show lacks %q:\n%s", want, out)
		}
	}

	out, _, err = exec(t.Context(), "session", "mode", "explore", "--session", "m1", "--nats", d.url)
	if err != nil || !strings.Contains(out, "\nmode: explore\n") || !strings.HasPrefix(out, "session m1 (updated ") {
		t.Fatalf("session mode explore: %v\n%s", err, out)
	}
	var view struct {
		State struct {
			Mode string `json:"mode"`
		} `json:"state"`
	}
	if err := d.client.Admin(t.Context(), "session.get", "m1", nil, &view); err != nil || view.State.Mode != "explore" {
		t.Fatalf("session.get: %+v %v", view, err)
	}
	out, _, err = exec(t.Context(), "session", "show", "--json", "--session", "m1", "--nats", d.url)
	var sv sessionView
	if err != nil || json.Unmarshal([]byte(out), &sv) != nil || sv.Session != "m1" || !sv.Stored || sv.State.Mode != "explore" {
		t.Fatalf("session show --json: %v\n%s", err, out)
	}

	out, _, err = exec(t.Context(), "activate", "admin", "--session", "m1", "--nats", d.url)
	if err != nil || !strings.Contains(out, "  [x] admin (external) — Operator tools.\n") {
		t.Fatalf("activate admin: %v\n%s", err, out)
	}
	if gs := groupsOf(t, d, "m1"); !gs["admin"].Active {
		t.Fatalf("groups after activate: %+v", gs)
	}
	out, _, err = exec(t.Context(), "activate", "admin", "--off", "--session", "m1", "--nats", d.url)
	if err != nil || !strings.Contains(out, "  [ ] admin (external) — Operator tools.\n") {
		t.Fatalf("activate --off: %v\n%s", err, out)
	}
	// Meta groups are switched by reset_tools, not by operators.
	_, _, err = exec(t.Context(), "activate", "ops", "--session", "m1", "--nats", d.url)
	wantErrCode(t, err, bus.CodeBadRequest)
	if !strings.Contains(err.Error(), "admin session.activate") {
		t.Fatalf("error does not name the verb: %v", err)
	}
}

func TestRenderSession(t *testing.T) {
	var v sessionView
	v.Session, v.Stored = "s1", true
	v.Groups = []bus.GroupInfo{{Name: "basic", Scope: bus.ScopeBasic, Active: true}, {Name: "ops", Scope: bus.ScopeMeta, Description: "Ops."}}
	v.State.Mode = "accept_edits"
	v.State.Rules = []bus.Rule{{Tool: "write"}, {Tool: "shell", Pattern: "rm:*", Behavior: "deny"}}
	v.State.WorkDirs = []string{"/srv/app", "/tmp"}
	var out strings.Builder
	renderSession(&out, &v)
	want := `session s1
mode: accept_edits
groups:
  [x] basic (basic)
  [ ] ops (meta) — Ops.
rules:
  allow write
  deny shell(rm:*)
work dirs: /srv/app, /tmp
`
	if out.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestResetInput(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{nil, `{}`},
		{[]string{"web", "ops"}, `{"web":true,"ops":true}`},
		{[]string{`a"b`}, `{"a\"b":true}`},
	} {
		if got := string(client.ResetInput(tc.names)); got != tc.want {
			t.Errorf("ResetInput(%q) = %s, want %s", tc.names, got, tc.want)
		}
	}
}
