package permission_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/shellcmd"
)

// TestAttackDenyRuleBypass (session 18, red team): a session in bypass
// mode with the rule "deny shell(rm:*)", the guard an operator writes to
// keep an agent from deleting files. The rule was matched against the
// command's text and its pieces between separators, so every command below
// ran rm under bash (a stand-in rm records that it ran) while Decide said
// "bypass mode allows it": a path (/dir/rm), a wrapper (command, env, exec,
// nice, timeout, xargs, time), an assignment prefix, a keyword before it
// (then, !), eval, sh -c, find -exec, a program named by an expansion, an
// alias. Now deny and ask rules also see every simple command of the
// syntax tree as the program it runs, and a command whose program is named
// only at run time asks instead of running past the rule.
func TestAttackDenyRuleBypass(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to show that the commands run rm")
	}
	bin := t.TempDir()
	marker := filepath.Join(t.TempDir(), "rm-ran")
	if err := os.WriteFile(filepath.Join(bin, "rm"), []byte("#!/bin/sh\necho ran > "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	def := &bus.ToolDef{Name: "shell", RuleMatcher: bus.MatcherCommand, RuleField: "command"}
	pc := permission.Context{Mode: permission.Bypass, Rules: []bus.Rule{{Tool: "shell", Pattern: "rm:*", Behavior: permission.Deny}}}
	for _, c := range []struct{ cmd, want string }{
		{"rm x", permission.Deny},
		{bin + "/rm x", permission.Deny},
		{"command rm x", permission.Deny},
		{"env rm x", permission.Deny},
		{"env -i PATH=" + bin + " rm x", permission.Deny},
		{"exec rm x", permission.Deny},
		{"nice -n 5 rm x", permission.Deny},
		{"timeout 5 rm x", permission.Deny},
		{"echo x | xargs rm", permission.Deny},
		{"time rm x", permission.Deny},
		{"X=1 rm x", permission.Deny},
		{"if true; then rm x; fi", permission.Deny},
		{"! rm x", permission.Deny},
		{"true && { rm x; }", permission.Deny},
		{"f() { rm x; }; f", permission.Deny},
		{"eval rm x", permission.Deny},
		{"eval 'rm x'", permission.Deny},
		{"sh -c 'rm x'", permission.Deny},
		{"bash -ec 'cd . && rm x'", permission.Deny},
		{"find . -maxdepth 0 -exec rm {} ';'", permission.Deny},
		{"$(echo rm) x", permission.Ask},
		{"`echo rm` x", permission.Ask},
		{"${RM:-rm} x", permission.Ask},
		{"r$'m' x", permission.Ask},
		{"shopt -s expand_aliases\nalias r=rm\nr x", permission.Ask},
	} {
		t.Run(c.cmd, func(t *testing.T) {
			_ = os.Remove(marker)
			sh := exec.Command(bash, "-c", c.cmd)
			sh.Dir, sh.Env = t.TempDir(), []string{"PATH=" + bin + ":/usr/bin:/bin"}
			out, _ := sh.CombinedOutput()
			if _, err := os.Stat(marker); err != nil {
				t.Fatalf("bash did not run rm (%s): the case shows nothing", out)
			}
			in, _ := json.Marshal(map[string]string{"command": c.cmd})
			d := permission.Decide(pc, def, in)
			if d.Behavior != c.want {
				t.Fatalf("%s (%s), want %s: the command runs rm past the rule", d.Behavior, d.Reason, c.want)
			}
		})
	}
	// Commands that run no rm are not caught.
	for _, cmd := range []string{"ls -l", "echo rm", "git rm --cached x", "grep -r rm .", "$(echo ls) -l"} {
		in, _ := json.Marshal(map[string]string{"command": cmd})
		if d := permission.Decide(pc, def, in); d.Behavior == permission.Deny {
			t.Errorf("%q: %s (%s)", cmd, d.Behavior, d.Reason)
		}
	}
}

// TestAttackDenyRuleCost: reading a command's programs for deny rules
// must not cost much more than deciding it without them (the parse for
// its writes), however hostile the command: a wrapper's suffixes, nested
// -c and eval arguments and find -exec could each make a quadratic amount
// (a 1 MiB "sh -c x -c x ..." parsed 200,000 times took 4.6 GB). Such a
// command asks once past the bounds.
func TestAttackDenyRuleCost(t *testing.T) {
	def := &bus.ToolDef{Name: "shell", RuleMatcher: bus.MatcherCommand, RuleField: "command"}
	deny := permission.Context{Mode: permission.Bypass, Rules: []bus.Rule{{Tool: "shell", Pattern: "rm:*", Behavior: permission.Deny}}}
	open := permission.Context{Mode: permission.Bypass}
	const n = 256 << 10
	allocated := func(pc permission.Context, in json.RawMessage) (permission.Decision, uint64) {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		d := permission.Decide(pc, def, in)
		runtime.ReadMemStats(&m1)
		return d, m1.TotalAlloc - m0.TotalAlloc
	}
	for name, cmd := range map[string]string{
		"wrapper's arguments": "env " + strings.Repeat("a ", n/2),
		"wrapper chain":       strings.Repeat("nice ", n/5) + "rm x",
		"find -exec":          "find . " + strings.Repeat("-exec ", n/6),
		"eval chain":          strings.Repeat("eval ", n/5) + "rm x",
		"sh -c":               "sh " + strings.Repeat("-c x ", n/5),
		"substitutions":       strings.Repeat("echo $(", 2000) + strings.Repeat(")", 2000),
		"many commands":       strings.Repeat("ls; ", n/4),
	} {
		t.Run(name, func(t *testing.T) {
			in, _ := json.Marshal(map[string]string{"command": cmd})
			_, base := allocated(open, in)
			d, cost := allocated(deny, in)
			if d.Behavior == permission.Allow && strings.Contains(cmd, "rm") {
				t.Errorf("%s: %s", d.Behavior, d.Reason)
			}
			if cost > 3*base+32<<20 {
				t.Fatalf("deciding with a deny rule allocated %d MiB, without %d MiB", cost>>20, base>>20)
			}
			// Without rules a decision costs a few parses (the writes',
			// the splitter's, the suggestions'), not one per part.
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			_, _ = shellcmd.Parse(cmd)
			runtime.ReadMemStats(&m1)
			parse := m1.TotalAlloc - m0.TotalAlloc
			if _, asked := allocated(permission.Context{}, in); asked > 4*parse+32<<20 {
				t.Fatalf("deciding without rules allocated %d MiB, parsing %d MiB", asked>>20, parse>>20)
			}
		})
	}
}
