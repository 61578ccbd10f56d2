package permission_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/shellcmd"
)

// FuzzMatches checks that matching, deciding and checking rules never panic,
// and that a tool-only rule always matches its tool.
func FuzzMatches(f *testing.F) {
	f.Add("git:*", "allow", "git status && ls", uint8(0), []byte(nil))
	f.Add("rm *", "deny", "(rm -rf /)", uint8(0), []byte(nil))
	f.Add("src/**/*.go", "allow", "../src/a/../../b.go", uint8(1), []byte(nil))
	f.Add("**/**/**/[a-", "ask", "/a/b/c/d/e/f", uint8(1), []byte(nil))
	f.Add("/x", "", "", uint8(2), []byte(`{"a":[{"b":"c"}]}`))
	f.Add(`\`, "deny", "echo 'a;b' \"$(x)\" `y` $'z' 2>&1 &>f", uint8(0), []byte(`"{\"command\":1}"`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, pattern, behavior, value string, matcher uint8, raw []byte) {
		def := &bus.ToolDef{Name: "T", Permission: bus.PermissionPassthrough}
		switch matcher % 4 {
		case 0:
			def.RuleMatcher, def.RuleField = bus.MatcherCommand, "v"
		case 1:
			def.RuleMatcher, def.RuleField = bus.MatcherPath, "v"
		case 2:
			def.RuleMatcher, def.RuleField = bus.MatcherCommand, pattern // a JSON pointer, maybe
		default:
			def.RuleMatcher = bus.MatcherNone
		}
		input := json.RawMessage(raw)
		if raw == nil {
			b, err := json.Marshal(map[string]string{"v": value})
			if err != nil {
				return
			}
			input = b
		}
		rule := bus.Rule{Tool: "T", Pattern: pattern, Behavior: behavior}
		permission.Matches(rule, def, input)
		if !permission.Matches(bus.Rule{Tool: "T"}, def, input) {
			t.Error("a tool-only rule does not match its tool")
		}
		_ = permission.CheckRule(rule)
		for _, mode := range []string{permission.Default, permission.AcceptEdits, permission.Bypass, permission.DontAsk} {
			pc := permission.Context{Mode: mode, Rules: []bus.Rule{rule}, WorkDirs: []string{dir, value}}
			d := permission.Decide(pc, def, input)
			switch d.Behavior {
			case permission.Allow, permission.Deny, permission.Ask:
			default:
				t.Fatalf("Decide behavior %q", d.Behavior)
			}
			if d.Reason == "" {
				t.Fatal("Decide without a reason")
			}
			if d.Behavior != permission.Ask && len(d.SuggestedRules) > 0 {
				t.Fatalf("suggested rules with %s", d.Behavior)
			}
			for _, r := range d.SuggestedRules {
				if err := permission.CheckRule(r); err != nil {
					t.Fatalf("suggested an invalid rule: %v", err)
				}
			}
		}
	})
}

// FuzzCommandWrites: whatever comes before it, a command line that ends
// with a write to a dangerous file is never allowed, by a rule for the
// program, a rule for the whole tool, or bypass mode.
func FuzzCommandWrites(f *testing.F) {
	for _, s := range []string{"ls", "git status && ls", "echo 'a;b' | cat", "(cd sub)", "ls \\", "x=1", "ls |", "# c", "sed -i s/a/b/ f", ""} {
		f.Add(s, uint8(0))
	}
	targets := []string{"> .gitconfig", ">> .git/config", ">| sub/.bashrc", "&> .profile", "> ./.GIT/hooks/pre-commit", `> "$HOME/.gitconfig"`,
		"> $PWD/.git/x", "| tee .git/config", "&& sed -i s/a/b/ .git/config", "&& cp a .gitconfig"}
	shell := &bus.ToolDef{Name: "shell", RuleMatcher: bus.MatcherCommand, RuleField: "command", PathBase: f.TempDir()}
	rules := []bus.Rule{{Tool: "shell"}, {Tool: "shell", Pattern: "cat:*"}, {Tool: "shell", Pattern: "ls:*"}, {Tool: permission.WriteTool}}
	f.Fuzz(func(t *testing.T, prefix string, which uint8) {
		if _, err := shellcmd.Parse(prefix); err != nil || strings.Contains(prefix, "<<") {
			return // the appended line might be read as part of a quote or a here-document
		}
		cmd := prefix + "\ncat x " + targets[int(which)%len(targets)]
		in, err := json.Marshal(map[string]string{"command": cmd})
		if err != nil {
			return
		}
		for _, mode := range []string{permission.Default, permission.AcceptEdits, permission.Bypass} {
			if d := permission.Decide(permission.Context{Mode: mode, Rules: rules}, shell, in); d.Behavior == permission.Allow {
				t.Fatalf("%s allowed %q: %s", mode, cmd, d.Reason)
			}
		}
	})
}
