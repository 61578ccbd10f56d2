package builtin

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/permission"
)

// chain makes links l0 -> l1 -> ... -> l<n-1> -> target in dir.
func chain(t *testing.T, dir string, n int, target string) {
	t.Helper()
	for i := range n {
		to := fmt.Sprintf("l%d", i+1)
		if i == n-1 {
			to = target
		}
		if err := os.Symlink(to, filepath.Join(dir, fmt.Sprintf("l%d", i))); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAttackLinkChainIntoGit: permission.Resolve gives up after 40 links
// and returns the link it stopped at; os.Root follows up to 8 more at use.
// A chain of 41 links ending in .git/config must not let the file tools
// read or write git's config (inGitDir judged the 41st link's name).
func TestAttackLinkChainIntoGit(t *testing.T) {
	f, base, _ := newFiles(t)
	mustWrite(t, filepath.Join(base, ".git", "config"), "[core]\n")
	chain(t, base, 42, ".git/config")
	var s session
	_, patch, err := f.Read(ReadIn{Path: "l0"})
	if err == nil {
		s.apply(t, patch)
	}
	_, _, err = f.Write(s.state, WriteIn{Path: "l0", Content: "[core]\n\tfsmonitor = touch pwned\n"})
	if err == nil {
		t.Fatal("write_file through a 42-link chain into .git/config succeeded")
	}
	if !strings.Contains(err.Error(), "more symlinks than can be followed") {
		t.Fatalf("refusal %v, want one naming the symlinks", err)
	}
	_, _, err = f.Edit(s.state, EditIn{Path: "l0", OldString: "[core]", NewString: "[core]\n\tfsmonitor = id"})
	if err == nil {
		t.Fatal("edit_file through a 42-link chain into .git/config succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(base, ".git", "config")); string(b) != "[core]\n" {
		t.Fatalf(".git/config is now %q", b)
	}
}

// TestAttackLinkChainPastRule: the same chain must not reach a file that a
// deny rule names, as the rule's resolution (permission.Resolve) stops at
// the 41st link: the file tools refuse what that resolution did not finish.
func TestAttackLinkChainPastRule(t *testing.T) {
	f, base, _ := newFiles(t)
	mustWrite(t, filepath.Join(base, "secret.txt"), "secret\n")
	chain(t, base, 42, "secret.txt")
	if r := permission.Resolve(filepath.Join(base, "l0")); r == filepath.Join(base, "secret.txt") {
		t.Skip("permission.Resolve followed the whole chain; nothing to test")
	}
	text, _, err := f.Read(ReadIn{Path: "l0"})
	if err == nil || strings.Contains(text, "secret") {
		t.Fatalf("read_file through a 42-link chain read %q (err %v)", text, err)
	}
	out, err := f.Search(t.Context(), SearchIn{Pattern: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "l0:") || strings.Contains(out, "l1:") {
		t.Fatalf("search_files followed the chain: %q", out)
	}
}

// TestAttackLeaveAndReenter: a link that leaves the base directory and a
// link outside that comes back in. The resolved path lies inside, so the
// file tools may open it; what they open must be what permission.Resolve
// named (no file outside is read), and a walk out and back through ".."
// past the base must not read outside either.
func TestAttackLeaveAndReenter(t *testing.T) {
	f, base, outside := newFiles(t)
	out := filepath.Dir(outside)
	if err := os.MkdirAll(filepath.Join(out, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	must(t, os.Symlink(filepath.Join(out, "d"), filepath.Join(base, "away")))
	must(t, os.Symlink(filepath.Join(base, "a.txt"), filepath.Join(out, "d", "back")))
	must(t, os.Symlink("../outside.txt", filepath.Join(out, "d", "leak")))
	// away/back resolves to a.txt: reading it or refusing are both safe.
	if text, _, err := f.Read(ReadIn{Path: "away/back"}); err == nil && !strings.Contains(text, "one") {
		t.Fatalf("away/back read %q, not a.txt", text)
	}
	for _, p := range []string{"away/leak", "away/../outside.txt", "away/back/../../outside.txt", "away/../base/../outside.txt", filepath.Join(base, "away", "..", "outside.txt")} {
		text, _, err := f.Read(ReadIn{Path: p})
		if err == nil || strings.Contains(text, "secret") {
			t.Fatalf("read_file %q read %q (err %v)", p, text, err)
		}
	}
	// A relative link whose ".." climbs past the base and comes back.
	must(t, os.Symlink("../base/../outside.txt", filepath.Join(base, "climb")))
	must(t, os.Symlink("../../../../../../../../"+strings.TrimPrefix(outside, "/"), filepath.Join(base, "deep")))
	for _, p := range []string{"climb", "deep"} {
		if text, _, err := f.Read(ReadIn{Path: p}); err == nil || strings.Contains(text, "secret") {
			t.Fatalf("read_file %q read %q (err %v)", p, text, err)
		}
		var s session
		if _, _, err := f.Write(s.state, WriteIn{Path: p, Content: "x"}); err == nil {
			t.Fatalf("write_file %q succeeded", p)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret\n" {
		t.Fatalf("outside.txt is now %q", b)
	}
}

// TestAttackLinkLoop: a loop of links must end in a refusal, not hang the
// worker (permission.Resolve stops after 40 links).
func TestAttackLinkLoop(t *testing.T) {
	f, base, _ := newFiles(t)
	must(t, os.Symlink("b", filepath.Join(base, "a")))
	must(t, os.Symlink("a", filepath.Join(base, "b")))
	if _, _, err := f.Read(ReadIn{Path: "a/x"}); err == nil {
		t.Fatal("read_file through a link loop succeeded")
	}
	var s session
	if _, _, err := f.Write(s.state, WriteIn{Path: "a", Content: "x"}); err == nil {
		t.Fatal("write_file through a link loop succeeded")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestAttackFieldConfusion: an input whose path the permission rules read
// at one key while the handler's typed decode (encoding/json, which folds
// case and keeps the last duplicate) fills the path from another. Each
// hostile input is one the deny rule does not catch; rulePath, which every
// file tool's handler runs before opening anything, must refuse it.
func TestAttackFieldConfusion(t *testing.T) {
	_, base, _ := newFiles(t)
	deny := permission.Context{WorkDirs: []string{base}, Rules: []bus.Rule{
		{Tool: "read_file", Pattern: "secret/**", Behavior: "deny"},
		{Tool: "Read", Pattern: "secret/**", Behavior: "deny"},
	}}
	for _, tc := range []struct{ tool, field, in string }{
		{"read_file", "path", `{"path":"a.txt","PATH":"secret/k"}`},
		{"read_file", "path", `{"path":"a.txt","Path":"secret/k"}`},
		{"read_file", "path", `{"PATH":"secret/k"}`},
		{"Read", "file_path", `{"file_path":"a.txt","File_Path":"secret/k"}`},
		{"Read", "file_path", `{"FILE_PATH":"secret/k"}`},
		{"read_file", "path", `{"path":"a.txt","paTh":"secret/k","path":"a.txt"}`}, // the exact key last
	} {
		d := fileDef(tc.tool, "", `{"type":"object"}`, true, base)
		d.RuleField = tc.field
		if dec := permission.Decide(deny, &d, json.RawMessage(tc.in)); dec.Behavior == permission.Deny {
			continue // the rules caught it: not a confusion
		}
		var in ReadIn
		if err := json.Unmarshal([]byte(tc.in), &in); err != nil {
			t.Fatal(err)
		}
		decoded := in.Path
		if tc.field == "file_path" {
			decoded = in.FilePath
		}
		if !strings.HasPrefix(decoded, "secret") {
			continue // the decode agrees with the rules
		}
		if err := rulePath(json.RawMessage(tc.in), tc.field, decoded); err == nil {
			t.Errorf("%s %s: the rules judged another path than %q, and rulePath let it through", tc.tool, tc.in, decoded)
		}
	}
	// Duplicate exact keys: the rules and the decode both keep the last.
	d := fileDef("read_file", "", `{"type":"object"}`, true, base)
	if dec := permission.Decide(deny, &d, json.RawMessage(`{"path":"a.txt","path":"secret/k"}`)); dec.Behavior != permission.Deny {
		t.Errorf("duplicate path keys, the last one denied: %+v", dec)
	}
	// Plain inputs pass.
	for field, in := range map[string]string{"path": `{"path":"a.txt","file_path":"secret/k"}`, "file_path": `{"file_path":"a.txt","path":"secret/k"}`} {
		if err := rulePath(json.RawMessage(in), field, "a.txt"); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
}

// TestAttackRuleFieldNamesThePath: every file tool's rules must match the
// field its schema (and so its handler) takes the path from, under both
// name profiles; AgentScope's Glob and Grep take path, not file_path, so
// a rule on file_path never saw their directory.
func TestAttackRuleFieldNamesThePath(t *testing.T) {
	_, base, _ := newFiles(t)
	for name, schema := range map[string]string{"Read": asReadSchema, "Write": asWriteSchema, "Edit": asEditSchema, "Glob": asGlobSchema, "Grep": asGrepSchema,
		"read_file": readSchema, "write_file": writeSchema, "edit_file": editSchema, "list_files": listSchema, "search_files": searchSchema} {
		field := cmp.Or(asRuleField[name], fileDef(name, "", "", true, base).RuleField)
		var s struct{ Properties map[string]any }
		if err := json.Unmarshal([]byte(schema), &s); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.Properties[field]; !ok {
			t.Errorf("%s: rules match %q, which the schema does not have", name, field)
		}
	}
	// The attack: a deny rule on Grep's directory.
	g := fileDef("Grep", "", asGrepSchema, true, base)
	g.RuleField = asRuleField["Grep"]
	deny := permission.Context{WorkDirs: []string{base}, Rules: []bus.Rule{{Tool: "Grep", Pattern: "secret/**", Behavior: "deny"}}}
	if dec := permission.Decide(deny, &g, json.RawMessage(`{"pattern":"x","path":"secret"}`)); dec.Behavior != permission.Deny {
		t.Errorf("Grep of a denied directory: %+v", dec)
	}
}
