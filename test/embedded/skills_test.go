package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/skills"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

// writeSkill writes a skill folder under root and returns its path.
func writeSkill(t *testing.T, root, name, desc string, extra map[string]string) string {
	t.Helper()
	dir := filepath.Join(root, name)
	files := map[string]string{"SKILL.md": "---\nname: " + name + "\ndescription: " + desc + "\n---\n# " + name + "\nFollow these steps.\n"}
	for k, v := range extra {
		files[k] = v
	}
	for p, s := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// skillEnv starts a router serving the skill folders dirs, groups docs
// (meta, activated by loading skill "pdf") and browse (meta, owning skill
// "web"), and a worker serving fill_form in group docs.
func skillEnv(t *testing.T, dirs ...string) *env {
	t.Helper()
	e := startEnv(t, 1, false, router.Config{Skills: dirs})
	for _, g := range []bus.Group{
		{Name: "docs", Description: "Document tools.", Scope: bus.ScopeMeta, ActivateOnSkill: "pdf"},
		{Name: "browse", Description: "Browsing.", Scope: bus.ScopeMeta, Skills: []string{"web"}},
	} {
		if err := e.client.Admin(t.Context(), "groups.put", "", g, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.waitGroups("docs", "browse")
	e.addWorker(func(w *worker.Worker) {
		if err := worker.Register(w, bus.ToolDef{Name: "fill_form", Description: "Fill a form.", Groups: []string{"docs"}, ReadOnly: true},
			func(_ context.Context, _ *worker.Call, in textIn) (string, error) { return "filled", nil }); err != nil {
			t.Fatal(err)
		}
	})
	e.waitLive("fill_form")
	return e
}

// toolsFor asks for the tool list of session as user (raw query, toolbus format).
func (e *env) toolsFor(t *testing.T, session, user string) bus.ToolsList {
	t.Helper()
	q := map[string]any{"format": "toolbus"}
	if user != "" {
		q["user"] = user
	}
	ev := newEvent(t, bus.TypeToolsQuery, q)
	ev.SessionID = session
	reply := e.request(t, eventMsg(t, bus.NewSubjects("").Tools(session), ev))
	if reply.Type != bus.TypeToolsList {
		t.Fatalf("tools reply %s: %s", reply.Type, reply.Data)
	}
	var list bus.ToolsList
	if err := json.Unmarshal(reply.Data, &list); err != nil {
		t.Fatal(err)
	}
	return list
}

func listNames(t *testing.T, list bus.ToolsList) []string {
	t.Helper()
	var out []string
	for _, raw := range list.Tools {
		var d struct{ Name string }
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d.Name)
	}
	return out
}

func loaderEnum(t *testing.T, list bus.ToolsList) []string {
	t.Helper()
	for _, raw := range list.Tools {
		var d struct {
			Name        string
			InputSchema struct {
				Properties struct {
					SkillID struct{ Enum []string } `json:"skillId"`
				}
			} `json:"input_schema"`
		}
		_ = json.Unmarshal(raw, &d)
		if d.Name == skills.LoaderName {
			return d.InputSchema.Properties.SkillID.Enum
		}
	}
	return nil
}

func TestSkillLoaderListingAndActivation(t *testing.T) {
	root := t.TempDir()
	writeSkill(t, root, "pdf", "Fill PDF forms.", map[string]string{"scripts/fill.py": "print('fill')\n", "logo.png": "\x89PNG\r\n\x1a\n\x00\x00"})
	writeSkill(t, root, "web", "Browse the web.", nil)
	e := skillEnv(t, root)

	list := e.toolsFor(t, "s1", "")
	if got := listNames(t, list); !slices.Equal(got, []string{"reset_tools", skills.LoaderName}) {
		t.Fatalf("tools %v, want reset_tools then the loader", got)
	}
	if enum := loaderEnum(t, list); !slices.Equal(enum, []string{"pdf"}) {
		t.Fatalf("enum %v: web belongs to the inactive group browse", enum)
	}
	if !strings.Contains(list.SkillsPrompt, "## pdf\nFill PDF forms.") || strings.Contains(list.SkillsPrompt, "web") {
		t.Fatalf("skills_prompt %q", list.SkillsPrompt)
	}

	// A skill of an inactive group is not loadable.
	res := call1(t, e.client, "s1", skills.LoaderName, `{"skillId":"web","path":"SKILL.md"}`)
	wantFailure(t, res, bus.StateError, bus.CodeInvalidInput, "")

	// Loading pdf activates docs for s1 only.
	res = call1(t, e.client, "s1", skills.LoaderName, `{"skillId":"pdf","path":"SKILL.md"}`)
	wantSuccess(t, res, "Skill: pdf\nDescription: Fill PDF forms.\nSource: dir:"+filepath.Join(root, "pdf")+"\n\n# pdf\nFollow these steps.\n")
	if got := listNames(t, e.toolsFor(t, "s1", "")); !slices.Equal(got, []string{"fill_form", "reset_tools", skills.LoaderName}) {
		t.Fatalf("s1 after the load: %v", got)
	}
	if got := listNames(t, e.toolsFor(t, "s2", "")); !slices.Equal(got, []string{"reset_tools", skills.LoaderName}) {
		t.Fatalf("s2 must not see docs: %v", got)
	}
	wantSuccess(t, call1(t, e.client, "s1", "fill_form", `{}`), "filled")
	wantFailure(t, call1(t, e.client, "s2", "fill_form", `{}`), bus.StateError, bus.CodeInactiveTool, "")

	// A load then a call of the activated tool in one batch.
	reply := e.call(t, "s3", []bus.Call{{ID: "a", Name: skills.LoaderName, Input: json.RawMessage(`{"skillId":"pdf","path":"scripts/fill.py"}`)},
		{ID: "b", Name: "fill_form", Input: json.RawMessage(`{}`)}})
	wantSuccess(t, reply.Results[0], "print('fill')\n")
	wantSuccess(t, reply.Results[1], "filled")

	// A binary resource is a data block.
	res = call1(t, e.client, "s1", skills.LoaderName, `{"skillId":"pdf","path":"logo.png"}`)
	if res.State != bus.StateSuccess || len(res.Output) != 1 || res.Output[0].Type != bus.BlockData || res.Output[0].MediaType != "image/png" {
		t.Fatalf("binary resource: %s", jsonOf(res))
	}
	// Refusals.
	res = call1(t, e.client, "s1", skills.LoaderName, `{"skillId":"pdf","path":"../web/SKILL.md"}`)
	wantFailure(t, res, bus.StateError, bus.CodeInvalidInput,
		"Resource not found: '../web/SKILL.md' in skill 'pdf'.\nAvailable resources:\n1. SKILL.md\n2. logo.png\n3. scripts/fill.py")

	// Activating browse makes web visible and loadable.
	wantSuccess(t, call1(t, e.client, "s1", "reset_tools", `{"browse":true}`), "The currently activated tool group(s): browse.")
	if enum := loaderEnum(t, e.toolsFor(t, "s1", "")); !slices.Equal(enum, []string{"pdf", "web"}) {
		t.Fatalf("enum with browse active: %v", enum)
	}
	res = call1(t, e.client, "s1", skills.LoaderName, `{"skillId":"web","path":"SKILL.md"}`)
	if res.State != bus.StateSuccess {
		t.Fatalf("web: %s", jsonOf(res))
	}

	// skills.list
	var sl struct {
		Skills []struct {
			Name, Description, Source, User, Digest string
			Groups                                  []string
		}
	}
	if err := e.client.Admin(t.Context(), "skills.list", "", struct{}{}, &sl); err != nil {
		t.Fatal(err)
	}
	if len(sl.Skills) != 2 || sl.Skills[0].Name != "pdf" || !strings.HasPrefix(sl.Skills[0].Digest, "sha256:") ||
		sl.Skills[1].Name != "web" || !slices.Equal(sl.Skills[1].Groups, []string{"browse"}) {
		t.Fatalf("skills.list %+v", sl)
	}
}

func TestSkillUserScope(t *testing.T) {
	root := t.TempDir()
	shared := writeSkill(t, root+"/shared", "notes", "Shared notes.", nil)
	mine := writeSkill(t, root+"/alice", "notes", "Alice's notes.", nil)
	e := skillEnv(t)
	st := e.skillsStore(t)
	if _, err := skills.Push(t.Context(), st, shared, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := skills.Push(t.Context(), st, mine, "alice"); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		if n := len(e.routers[0].Skills().All()); n != 2 {
			return fmt.Errorf("%d skills", n)
		}
		return nil
	})
	if p := e.toolsFor(t, "s", "alice").SkillsPrompt; !strings.Contains(p, "Alice's notes.") {
		t.Fatalf("alice's prompt %q", p)
	}
	if p := e.toolsFor(t, "s", "bob").SkillsPrompt; !strings.Contains(p, "Shared notes.") {
		t.Fatalf("bob's prompt %q", p)
	}
	load := bus.Call{ID: "c1", Name: skills.LoaderName, Input: json.RawMessage(`{"skillId":"notes","path":"SKILL.md"}`)}
	res := e.batch(t, "s", bus.Batch{Calls: []bus.Call{load}, User: json.RawMessage(`"alice"`)}).Results[0]
	if !strings.Contains(textOf(res), "Alice's notes.") {
		t.Fatalf("alice loads %s", jsonOf(res))
	}
	res = call1(t, e.client, "s", skills.LoaderName, `{"skillId":"notes","path":"SKILL.md"}`)
	if !strings.Contains(textOf(res), "Shared notes.") {
		t.Fatalf("no user loads %s", jsonOf(res))
	}
}

// skillsStore opens the deployment's P_skills object store.
func (e *env) skillsStore(t *testing.T) jetstream.ObjectStore {
	t.Helper()
	js := testkit.JetStream(t, e.nc)
	os, err := store.SkillsStore(t.Context(), js, bus.NewSubjects(""), 1)
	if err != nil {
		t.Fatal(err)
	}
	return os
}

// TestShellRunsSkillScript: the shell tool puts a pushed skill's files in a
// directory named by its digest and runs its script from there.
func TestShellRunsSkillScript(t *testing.T) {
	root := t.TempDir()
	dir := writeSkill(t, root, "greet", "Greet people.", map[string]string{"scripts/hello.sh": "echo \"hello from $(basename \"$SKILL_DIR\")\"\n"})
	e := skillEnv(t)
	if _, err := skills.Push(t.Context(), e.skillsStore(t), dir, ""); err != nil {
		t.Fatal(err)
	}
	r := e.routers[0]
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		if len(r.Skills().Skills("")) != 1 {
			return fmt.Errorf("skill not seen")
		}
		return nil
	})
	digest := r.Skills().Skills("")[0].Digest
	m, err := skills.NewMaterializer(r.Skills(), filepath.Join(t.TempDir(), "mat"))
	if err != nil {
		t.Fatal(err)
	}
	e.addWorker(func(w *worker.Worker) {
		if err := builtin.RegisterWith(t.Context(), w, builtin.Config{WorkDir: t.TempDir(), Skills: m, ShellAllow: []string{"echo"}, ShellTrust: []string{"sh"}, ShellAsRoot: true}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitLive("shell")
	// Allow the shell in this session (the default mode would ask).
	if err := e.client.Admin(t.Context(), "session.mode", "sh1", map[string]string{"mode": "bypass"}, nil); err != nil {
		t.Fatal(err)
	}
	res := call1(t, e.client, "sh1", "shell", `{"command":"sh $SKILL_DIR/scripts/hello.sh","skill":"greet"}`)
	name := strings.Replace(digest, ":", "-", 1)
	if res.State != bus.StateSuccess || !strings.Contains(textOf(res), "hello from "+name) || !strings.Contains(textOf(res), "Skill greet's files are in ") {
		t.Fatalf("shell: %s", jsonOf(res))
	}
	res = call1(t, e.client, "sh1", "shell", `{"command":"cat /etc/passwd"}`)
	wantFailure(t, res, bus.StateError, bus.CodeToolError, "")
	if !strings.Contains(textOf(res), `the program "cat" is not allowed`) {
		t.Fatalf("allow-list: %s", textOf(res))
	}
}
