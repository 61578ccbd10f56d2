package permission_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/shellcmd"
)

// costContexts are the permission contexts a command's decision is
// measured in: no rule (an ask with suggestions), a deny rule (bypass:
// the programs are read), an allow rule covering every part.
var costContexts = []struct {
	name string
	pc   permission.Context
}{
	{"none", permission.Context{}},
	{"deny", permission.Context{Mode: permission.Bypass, Rules: []bus.Rule{{Tool: "shell", Pattern: "rm:*", Behavior: permission.Deny}}}},
	{"allow", permission.Context{Rules: []bus.Rule{{Tool: "shell", Pattern: "ls:*"}}}},
}

// BenchmarkDecideCommand measures a command tool's decision per byte of
// its command ("ls; " repeated), the cost an agent's long commands put on
// the router (docs/security.md).
func BenchmarkDecideCommand(b *testing.B) {
	def := &bus.ToolDef{Name: "shell", RuleMatcher: bus.MatcherCommand, RuleField: "command"}
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		cmd := strings.Repeat("ls; ", size/4)
		in, _ := json.Marshal(map[string]string{"command": cmd})
		for _, c := range costContexts {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, c.name), func(b *testing.B) {
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				cpu0 := testkit.ProcessCPU()
				for b.Loop() {
					permission.Decide(c.pc, def, in)
				}
				cpu := testkit.ProcessCPU() - cpu0
				runtime.ReadMemStats(&m1)
				n := float64(b.N) * float64(size)
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/byte")
				// The process's CPU time (the garbage collector's included)
				// varies less than the wall time on a shared machine.
				b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/byte")
				b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/n, "B/byte")
			})
		}
	}
}

// allocatedBy returns what one decision allocates.
func allocatedBy(pc permission.Context, def *bus.ToolDef, in json.RawMessage) (permission.Decision, uint64) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	d := permission.Decide(pc, def, in)
	runtime.ReadMemStats(&m1)
	return d, m1.TotalAlloc - m0.TotalAlloc
}

// TestAttackCommandDecisionCost (session 18, red team; session 19): a
// 1 MiB command ("ls; " 250,000 times) cost its decision 1.0 s of a
// router core and 288 MB of allocations, since it was parsed twice,
// split and cut into pieces and suggested rules, all as copies. Now a
// command longer than MaxCommand is not analysed (it asks, with Safety,
// unless a deny or ask rule matches its start), and one within it costs
// about a parse: at most 30 bytes allocated per byte past the bound,
// and within it a bounded multiple of what parsing it costs.
func TestAttackCommandDecisionCost(t *testing.T) {
	def := &bus.ToolDef{Name: "shell", RuleMatcher: bus.MatcherCommand, RuleField: "command"}
	for _, c := range costContexts {
		for _, size := range []int{1 << 20, 256 << 10} {
			cmd := strings.Repeat("ls; ", size/4)
			in, _ := json.Marshal(map[string]string{"command": cmd})
			d, cost := allocatedBy(c.pc, def, in)
			if d.Behavior == permission.Allow || !d.Safety {
				t.Errorf("%s, %d bytes: %s safety=%v (%s)", c.name, size, d.Behavior, d.Safety, d.Reason)
			}
			// The bound's analysis of the start (a deny rule's programs)
			// is a fixed cost: some MiB.
			if limit := uint64(30*size) + 16<<20; cost > limit {
				t.Errorf("%s, %d bytes: allocated %d bytes, %.1f per byte", c.name, size, cost, float64(cost)/float64(size))
			}
		}
	}
}

// TestLongCommand: past MaxCommand a command asks with Safety whatever
// allows it (mode, tool, rules), with no suggested rule; dont_ask and
// explore deny it; a deny or ask rule matching its first MaxCommand
// bytes still decides. At MaxCommand it is analysed as before.
func TestLongCommand(t *testing.T) {
	def := &bus.ToolDef{Name: "shell", RuleMatcher: bus.MatcherCommand, RuleField: "command"}
	allowing := &bus.ToolDef{Name: "shell", RuleMatcher: bus.MatcherCommand, RuleField: "command", Permission: bus.PermissionAllow}
	pad := func(n int, head, tail string) string {
		return head + strings.Repeat("ls; ", (n-len(head)-len(tail))/4) + strings.Repeat(" ", (n-len(head)-len(tail))%4) + tail
	}
	at, past := pad(permission.MaxCommand, "", ""), pad(permission.MaxCommand+1, "", "")
	if len(at) != permission.MaxCommand || len(past) != permission.MaxCommand+1 {
		t.Fatal("pad")
	}
	lsRule := []bus.Rule{allow("shell", "ls:*")}
	if d := permission.Decide(permission.Context{Rules: lsRule}, def, in("command", at)); d.Behavior != permission.Allow {
		t.Fatalf("%d bytes: %s (%s), want allow: the bound is past MaxCommand", len(at), d.Behavior, d.Reason)
	}
	for _, c := range []struct {
		name string
		def  *bus.ToolDef
		pc   permission.Context
		cmd  string
		want string // behavior, "!" for safety
	}{
		{"allow rule", def, permission.Context{Rules: lsRule}, past, "ask!"},
		{"tool-wide rule", def, permission.Context{Rules: []bus.Rule{allow("shell", "")}}, past, "ask!"},
		{"bypass", def, permission.Context{Mode: permission.Bypass}, past, "ask!"},
		{"accept_edits", def, permission.Context{Mode: permission.AcceptEdits, WorkDirs: []string{t.TempDir()}}, past, "ask!"},
		{"tool allows", allowing, permission.Context{}, past, "ask!"},
		{"no rule", def, permission.Context{}, past, "ask!"},
		{"dont_ask", def, permission.Context{Mode: permission.DontAsk, Rules: lsRule}, past, "deny!"},
		{"explore", def, permission.Context{Mode: permission.Explore}, past, "deny"},
		{"deny rule on the start", def, permission.Context{Mode: permission.Bypass, Rules: []bus.Rule{deny("shell", "rm:*")}},
			pad(permission.MaxCommand+1, "rm -rf x; ", ""), "deny"},
		{"deny rule on a program at the start", def, permission.Context{Mode: permission.Bypass, Rules: []bus.Rule{deny("shell", "rm:*")}},
			pad(permission.MaxCommand+1, "env /bin/rm -rf x; ", ""), "deny"},
		{"tool-wide deny rule", def, permission.Context{Rules: []bus.Rule{deny("shell", "")}}, past, "deny"},
		{"ask rule on the start", def, permission.Context{Mode: permission.Bypass, Rules: []bus.Rule{ask("shell", "git push:*")}},
			pad(permission.MaxCommand+1, "git push; ", ""), "ask"},
		{"deny rule past the start", def, permission.Context{Mode: permission.Bypass, Rules: []bus.Rule{deny("shell", "rm:*")}},
			pad(permission.MaxCommand+10, "", "; rm -rf x"), "ask!"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := permission.Decide(c.pc, c.def, in("command", c.cmd))
			if got := outcome(d); got != c.want {
				t.Fatalf("%s (%s), want %s", got, d.Reason, c.want)
			}
			if len(d.SuggestedRules) > 0 {
				t.Fatalf("suggested %+v", d.SuggestedRules)
			}
			if c.want == "ask!" && !strings.Contains(d.Reason, "longer than the 65536") {
				t.Fatalf("reason %q", d.Reason)
			}
		})
	}
	// Matches: no allow pattern covers it; deny rules read its start.
	if permission.Matches(allow("shell", "ls:*"), def, in("command", past)) {
		t.Error("an allow rule matches a command past the bound")
	}
	if !permission.Matches(deny("shell", "ls:*"), def, in("command", past)) {
		t.Error("a deny rule does not match the start of a command past the bound")
	}
}

// TestDenyRuleCostUnderBound is TestAttackDenyRuleCost for commands just
// under MaxCommand, which are analysed: reading the programs for a deny
// rule stays within a few times the decision without it.
func TestDenyRuleCostUnderBound(t *testing.T) {
	def := &bus.ToolDef{Name: "shell", RuleMatcher: bus.MatcherCommand, RuleField: "command"}
	deny := permission.Context{Mode: permission.Bypass, Rules: []bus.Rule{{Tool: "shell", Pattern: "rm:*", Behavior: permission.Deny}}}
	open := permission.Context{Mode: permission.Bypass}
	const n = permission.MaxCommand - 64
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
			if len(cmd) > permission.MaxCommand {
				t.Fatalf("%d bytes", len(cmd))
			}
			in, _ := json.Marshal(map[string]string{"command": cmd})
			_, base := allocatedBy(open, def, in)
			d, cost := allocatedBy(deny, def, in)
			if d.Behavior == permission.Allow && strings.Contains(cmd, "rm") {
				t.Errorf("%s: %s", d.Behavior, d.Reason)
			}
			if cost > 3*base+8<<20 {
				t.Fatalf("deciding with a deny rule allocated %d KiB, without %d KiB", cost>>10, base>>10)
			}
		})
	}
}

// TestSuggestedRulesBound: an ask suggests at most 32 rules; a command
// that would need more (a script of many programs) gets none, since no
// smaller set allows it next time.
func TestSuggestedRulesBound(t *testing.T) {
	def := &bus.ToolDef{Name: "shell", RuleMatcher: bus.MatcherCommand, RuleField: "command"}
	script := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "prog%d x; prog%d y; ", i, i)
		}
		return b.String()
	}
	d := permission.Decide(permission.Context{}, def, in("command", script(32)))
	if d.Behavior != permission.Ask || len(d.SuggestedRules) != 32 {
		t.Fatalf("32 programs: %s, %d suggested", d.Behavior, len(d.SuggestedRules))
	}
	if d := permission.Decide(permission.Context{Rules: d.SuggestedRules}, def, in("command", script(32))); d.Behavior != permission.Allow {
		t.Fatalf("with the suggested rules: %s (%s)", d.Behavior, d.Reason)
	}
	if d := permission.Decide(permission.Context{}, def, in("command", script(33))); d.Behavior != permission.Ask || len(d.SuggestedRules) != 0 {
		t.Fatalf("33 programs: %s, %d suggested", d.Behavior, len(d.SuggestedRules))
	}
	// Those an allow rule covers do not count.
	if d := permission.Decide(permission.Context{Rules: []bus.Rule{allow("shell", "prog0:*")}}, def, in("command", script(33))); len(d.SuggestedRules) != 32 {
		t.Fatalf("33 programs, one allowed: %d suggested", len(d.SuggestedRules))
	}
}

// FuzzDecideCommand: deciding any command (short, or padded past
// MaxCommand with a comment line) does not panic; a command a deny rule matches is denied;
// and a command that ends by running rm (after any prefix that parses
// as complete commands) is never allowed with "deny shell(rm:*)", in any
// mode, whatever allow rules there are.
func FuzzDecideCommand(f *testing.F) {
	for _, s := range append(goldenCommands()[:200], "ls", "", "rm x", "echo 'a", "cat <<EOF\nx") {
		if len(s) < 512 {
			f.Add(s, false)
		}
	}
	f.Add("ls; ", true)
	def := &bus.ToolDef{Name: "shell", RuleMatcher: bus.MatcherCommand, RuleField: "command", PathBase: f.TempDir()}
	denyRm := deny("shell", "rm:*")
	rules := []bus.Rule{denyRm, allow("shell", ""), allow("shell", "ls:*"), allow(permission.WriteTool, "")}
	modes := []string{permission.Default, permission.AcceptEdits, permission.Bypass, permission.DontAsk, permission.Explore}
	f.Fuzz(func(t *testing.T, prefix string, long bool) {
		pad := ""
		if long { // past MaxCommand with a comment, cheap to parse
			pad = "\n#" + strings.Repeat("x", permission.MaxCommand)
		}
		cmds := []string{prefix, prefix + "\nrm x", "rm x;" + prefix}
		if long {
			cmds = []string{prefix + pad + "\nrm x"} // each decision reads 64 KiB
		}
		for _, cmd := range cmds {
			input, err := json.Marshal(map[string]string{"command": cmd})
			if err != nil {
				return
			}
			denied := permission.Matches(denyRm, def, input)
			modes := modes
			if long {
				modes = modes[2:3] // bypass, the most lenient (each decision reads 64 KiB)
			}
			for _, mode := range modes {
				d := permission.Decide(permission.Context{Mode: mode, Rules: rules}, def, input)
				if denied && d.Behavior != permission.Deny {
					t.Fatalf("%s: the deny rule matches %q, decided %s (%s)", mode, cut(cmd), d.Behavior, d.Reason)
				}
				if d.Behavior == permission.Allow && strings.Contains(cmd, "rm") && runsRm(prefix, cmd) {
					t.Fatalf("%s: allowed %q, which runs rm: %s", mode, cut(cmd), d.Reason)
				}
			}
		}
	})
}

// runsRm reports whether cmd surely runs rm x: it is prefix (and a
// comment) and then rm on a line of its own, or rm first, and prefix
// parses as complete commands (no open quote or here-document to
// swallow the rm).
func runsRm(prefix, cmd string) bool {
	if !strings.HasPrefix(cmd, "rm x;") && !strings.HasSuffix(cmd, "\nrm x") {
		return false
	}
	_, err := shellcmd.Parse(prefix)
	return err == nil && !strings.Contains(prefix, "<<")
}

func cut(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// TestDeepCommand: a command that nests too deep to be parsed
// (shellcmd.ErrTooDeep) is not taken for one that merely does not parse,
// whose writes are none: it asks with Safety like a long one, whatever
// allows it; deny rules still read its pieces.
func TestDeepCommand(t *testing.T) {
	def := &bus.ToolDef{Name: "shell", RuleMatcher: bus.MatcherCommand, RuleField: "command"}
	deep := strings.Repeat("{ ", 2000) + "cat x > .bashrc;" + strings.Repeat(" }", 2000)
	for _, pc := range []permission.Context{{Mode: permission.Bypass}, {Rules: []bus.Rule{allow("shell", "")}}} {
		d := permission.Decide(pc, def, in("command", deep))
		if outcome(d) != "ask!" || !strings.Contains(d.Reason, "nests too deep") {
			t.Fatalf("%+v: %s (%s)", pc, outcome(d), d.Reason)
		}
	}
	pc := permission.Context{Mode: permission.Bypass, Rules: []bus.Rule{deny("shell", "rm:*")}}
	if d := permission.Decide(pc, def, in("command", strings.Repeat("( ", 2000)+"rm x"+strings.Repeat(" )", 2000))); d.Behavior != permission.Deny {
		t.Fatalf("deny rule: %s (%s)", d.Behavior, d.Reason)
	}
	// A nested sh -c too deep to read asks under a deny rule.
	if d := permission.Decide(pc, def, in("command", "sh -c '"+strings.Repeat("$(", 2000)+"rm x"+strings.Repeat(")", 2000)+"'")); d.Behavior == permission.Allow {
		t.Fatalf("nested: %s (%s)", d.Behavior, d.Reason)
	}
}
