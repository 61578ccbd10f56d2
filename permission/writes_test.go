package permission_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/permission"
)

// TestCommandWrites: a command's redirections and in-place edits are
// writes to their targets, judged as write_file calls: the dangerous-path
// safety ask holds whatever rule allows the program (issue 26: `cat x >
// .gitconfig` under allow shell(cat:*) ran without asking), write_file's
// deny and ask rules apply, and a rule for a program allows a write only
// where write_file would be allowed.
func TestCommandWrites(t *testing.T) {
	base := t.TempDir()
	if err := os.Symlink(".git", filepath.Join(base, "lnk")); err != nil {
		t.Fatal(err)
	}
	shell := &bus.ToolDef{Name: "shell", RuleMatcher: bus.MatcherCommand, RuleField: "command", PathBase: base}
	progs := []bus.Rule{allow("shell", "cat:*"), allow("shell", "ls:*"), allow("shell", "sed:*"), allow("shell", "cp:*"), allow("shell", "tee:*")}
	writes := append([]bus.Rule{allow(permission.WriteTool, filepath.Join(base, "out", "**"))}, progs...)
	tests := []struct {
		name, mode, command string
		rules               []bus.Rule
		want                string
		safety              bool
		reason              string
	}{
		{"issue 26", "", "cat x > .gitconfig", progs, "ask", true, "dangerous path .gitconfig"},
		{"bashrc", "", "cat x > .bashrc", progs, "ask", true, ".bashrc"},
		{"under ls", "", "ls > .gitconfig", progs, "ask", true, ".gitconfig"},
		{"append to git config", "", "ls >> .git/config", progs, "ask", true, ".git"},
		{"through a link", "", "cat x > lnk/config", progs, "ask", true, "resolves to"},
		{"sed -i", "", "sed -i s/a/b/ .git/config", progs, "ask", true, "(sed -i)"},
		{"cp", "", "cp x .gitconfig", progs, "ask", true, "(cp)"},
		{"tee", "", "ls | tee .profile", progs, "ask", true, "(tee)"},
		{"computed", "", `cat x > "$HOME/.gitconfig"`, progs, "ask", true, "computed path"},
		{"bypass", permission.Bypass, "cat x > .gitconfig", nil, "ask", true, ".gitconfig"},
		{"tool-wide rule", "", "cat x > .bashrc", []bus.Rule{allow("shell", "")}, "ask", true, ".bashrc"},
		{"dont_ask", permission.DontAsk, "cat x > .gitconfig", progs, "deny", true, ".gitconfig"},
		// Ordinary writes need what write_file needs.
		{"no write rule", "", "cat x > notes.txt", progs, "ask", false, "no write_file rule allows its write to " + filepath.Join(base, "notes.txt")},
		{"write rule", "", "cat x > out/notes.txt", writes, "allow", false, ""},
		{"write rule elsewhere", "", "cat x > notes.txt", writes, "ask", false, "no write_file rule"},
		{"accept_edits", permission.AcceptEdits, "cat x > notes.txt && sed -i s/a/b/ notes.txt", progs, "allow", false, ""},
		{"accept_edits outside", permission.AcceptEdits, "cat x > /etc/motd", progs, "ask", false, "/etc/motd"},
		{"computed target", "", "cat x > $OUT", writes, "ask", false, "computed when it runs"},
		{"cd moves targets", "", "cd out && cat x > notes.txt", append(writes, allow("shell", "cd:*")), "ask", false, "computed"},
		{"devices", "", "cat x 2>/dev/null >&2", progs, "allow", false, ""},
		{"reads only", "", "cat .git/config .bashrc", progs, "allow", false, ""},
		{"tool-wide rule grants plain writes", "", "cat x > notes.txt", []bus.Rule{allow("shell", "")}, "allow", false, ""},
		{"write_file deny rule", "", "cat x > out/secret", append([]bus.Rule{deny(permission.WriteTool, filepath.Join(base, "out", "secret"))}, writes...), "deny", false, "denies"},
		{"write_file ask rule", "", "cp x out/y", append([]bus.Rule{{Tool: permission.WriteTool, Pattern: filepath.Join(base, "out", "*"), Behavior: permission.Ask}}, writes...), "ask", false, "asks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := permission.Decide(permission.Context{Mode: tt.mode, Rules: tt.rules}, shell, in("command", tt.command))
			if d.Behavior != tt.want || d.Safety != tt.safety || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("Decide(%q) = %s safety=%v (%s), want %s safety=%v containing %q", tt.command, d.Behavior, d.Safety, d.Reason, tt.want, tt.safety, tt.reason)
			}
		})
	}
	// The ask suggests the write_file rule that would allow the write.
	d := permission.Decide(permission.Context{Rules: progs}, shell, in("command", "cat x > out/a.txt"))
	if len(d.SuggestedRules) != 1 || d.SuggestedRules[0].Tool != permission.WriteTool || d.SuggestedRules[0].Pattern != filepath.Join(base, "out")+"/**" {
		t.Errorf("suggested %+v", d.SuggestedRules)
	}
}
