package permission_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/permission"
)

// TestPathBase: a tool that declares its base directory (path_base, as the
// built-ins do with --workdir) is judged on the file it will really touch,
// however the path is spelt: a rule remembered for one spelling allows the
// others, accept_edits treats them alike, and the suggested rule names the
// tool's directory, not the session's work_dirs or the router's own.
func TestPathBase(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir() // the session's work_dirs, as in a config's [/srv]
	if err := os.MkdirAll(filepath.Join(base, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(base, link); err != nil {
		t.Fatal(err)
	}
	def := &bus.ToolDef{Name: "write_file", Permission: bus.PermissionPassthrough, RuleMatcher: bus.MatcherPath, RuleField: "path", PathBase: base}
	spellings := []struct{ name, path string }{
		{"relative", "hello.txt"},
		{"dot", "./hello.txt"},
		{"absolute", filepath.Join(base, "hello.txt")},
		{"dot-dot inside", "sub/../hello.txt"},
		{"through a symlink", filepath.Join(link, "hello.txt")},
	}
	for _, workDirs := range [][]string{nil, {elsewhere}} {
		// The rule one spelling suggests allows every other spelling.
		first := permission.Decide(permission.Context{Mode: permission.Default, WorkDirs: workDirs}, def, in("path", "hello.txt"))
		if first.Behavior != permission.Ask || len(first.SuggestedRules) != 1 {
			t.Fatalf("work_dirs %v: first write: %+v", workDirs, first)
		}
		if want := filepath.ToSlash(base) + "/**"; first.SuggestedRules[0].Pattern != want {
			t.Fatalf("work_dirs %v: suggested %q, want %q", workDirs, first.SuggestedRules[0].Pattern, want)
		}
		remembered := permission.Context{Mode: permission.Default, Rules: first.SuggestedRules, WorkDirs: workDirs}
		for _, s := range append(spellings, struct{ name, path string }{"another file", "third.txt"}) {
			if d := permission.Decide(remembered, def, in("path", s.path)); d.Behavior != permission.Allow {
				t.Errorf("work_dirs %v, %s (%s): %s (%s), want allow by the remembered rule", workDirs, s.name, s.path, d.Behavior, d.Reason)
			}
		}
		// accept_edits: every spelling gets the same answer.
		want := ""
		for _, s := range spellings {
			d := permission.Decide(permission.Context{Mode: permission.AcceptEdits, WorkDirs: workDirs}, def, in("path", s.path))
			if want == "" {
				want = d.Behavior
			}
			if d.Behavior != want {
				t.Errorf("work_dirs %v, accept_edits, %s: %s, want %s like the other spellings", workDirs, s.name, d.Behavior, want)
			}
		}
		if workDirs == nil && want != permission.Allow {
			t.Errorf("accept_edits without work_dirs: %s, want allow inside the tool's own directory", want)
		}
		if workDirs != nil && want != permission.Ask {
			t.Errorf("accept_edits with work_dirs elsewhere: %s, want ask", want)
		}
	}
	// Outside the base, whatever the spelling, a rule for the base does not allow it.
	rule := []bus.Rule{allow("write_file", filepath.ToSlash(base)+"/**")}
	for _, p := range []string{"../escape.txt", filepath.Join(elsewhere, "x.txt"), "sub/../../escape.txt"} {
		if d := permission.Decide(permission.Context{Mode: permission.Default, Rules: rule}, def, in("path", p)); d.Behavior == permission.Allow {
			t.Errorf("%s outside the base: allowed", p)
		}
	}
}
