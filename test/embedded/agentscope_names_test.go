package embedded

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestBuiltinAgentScopeNames: the built-ins under AgentScope's names and
// field names (builtin.NamesAgentScope) read, write and edit as the toolbus
// names do (Edit after Read, through the session's read records), refuse an
// option they lack, and permission rules match file_path.
func TestBuiltinAgentScopeNames(t *testing.T) {
	dir := t.TempDir()
	e := startEnv(t, 1, false, router.Config{DefaultRules: []bus.Rule{{Tool: "Write", Pattern: dir + "/secret/**", Behavior: "deny"}}})
	e.addWorker(func(w *worker.Worker) {
		if err := builtin.RegisterWith(t.Context(), w, builtin.Config{WorkDir: dir, Names: builtin.NamesAgentScope, ShellAllow: []string{"cat"}, ShellAsRoot: true}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitLive("Read", "Write", "Edit", "Glob", "Grep", "Bash")
	got := listNames(t, e.toolsFor(t, "s1", ""))
	for _, n := range []string{"read_file", "write_file", "shell"} {
		if slices.Contains(got, n) {
			t.Fatalf("%s listed under the agentscope profile: %v", n, got)
		}
	}
	if err := e.client.Admin(t.Context(), "session.mode", "s1", map[string]string{"mode": "bypass"}, nil); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "a.txt")
	if res := call1(t, e.client, "s1", "Write", `{"file_path":"`+p+`","content":"hello\nworld\n"}`); res.State != bus.StateSuccess {
		t.Fatalf("Write: %s", jsonOf(res))
	}
	if err := os.WriteFile(p, []byte("hello\nworld\n"), 0o644); err != nil { // changed behind the tools' back
		t.Fatal(err)
	}
	res := call1(t, e.client, "s1", "Edit", `{"file_path":"a.txt","old_string":"world","new_string":"bus"}`)
	if res.State != bus.StateError {
		t.Fatalf("Edit of a file changed since its last Read or Write: %s", jsonOf(res))
	}
	if res := call1(t, e.client, "s1", "Read", `{"file_path":"a.txt"}`); res.State != bus.StateSuccess || !strings.Contains(res.Output[0].Text, "world") {
		t.Fatalf("Read: %s", jsonOf(res))
	}
	if res := call1(t, e.client, "s1", "Edit", `{"file_path":"a.txt","old_string":"world","new_string":"bus"}`); res.State != bus.StateSuccess {
		t.Fatalf("Edit after Read: %s", jsonOf(res))
	}
	if b, _ := os.ReadFile(p); string(b) != "hello\nbus\n" {
		t.Fatalf("file %q", b)
	}
	if res := call1(t, e.client, "s1", "Grep", `{"pattern":"bus","path":"."}`); res.State != bus.StateSuccess || !strings.Contains(res.Output[0].Text, "a.txt:2:bus") {
		t.Fatalf("Grep: %s", jsonOf(res))
	}
	if res := call1(t, e.client, "s1", "Bash", `{"command":"cat a.txt","description":"show it"}`); res.State != bus.StateSuccess || !strings.Contains(res.Output[0].Text, "bus") {
		t.Fatalf("Bash: %s", jsonOf(res))
	}
	wantFailure(t, call1(t, e.client, "s1", "Grep", `{"pattern":"bus","-A":2}`), bus.StateError, bus.CodeInvalidInput, "")
	wantFailure(t, call1(t, e.client, "s1", "Read", `{"path":"a.txt"}`), bus.StateError, bus.CodeInvalidInput, "")

	// A deny rule on file_path (the rule field of the profile) holds.
	wantFailure(t, call1(t, e.client, "s1", "Write", `{"file_path":"secret/x","content":"X=1"}`), bus.StateDenied, bus.CodeDenied, "")
	if _, err := os.Stat(filepath.Join(dir, "secret", "x")); err == nil {
		t.Fatal("a denied Write wrote")
	}
}

func TestBuiltinNamesRefusesUnknown(t *testing.T) {
	w := &worker.Worker{}
	if err := builtin.RegisterWith(t.Context(), w, builtin.Config{Names: "claude"}); err == nil || !strings.Contains(err.Error(), `unknown names profile "claude"`) {
		t.Fatalf("err %v", err)
	}
}
