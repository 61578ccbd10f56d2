package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/security"
)

// TestShellNotRootOnSecureRouter: a root router started from the
// generated configuration (--secure) with --workdir and no --shell-user
// runs the shell's commands as nobody, not root (issue 26), and says at
// start that the workdir is not writable by that user when it is not.
func TestShellNotRootOnSecureRouter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := filepath.Join(t.TempDir(), "secure")
	work := t.TempDir()
	// Readable, not writable, by nobody.
	for _, d := range []string{filepath.Dir(work), work} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m, stderr := startRun(t, []string{"--secure", dir, "--listen", "127.0.0.1:-1", "--data", filepath.Join(t.TempDir(), "data"),
		"--heartbeat", "500ms", "--workdir", work, "--shell-allow", "id"},
		regexp.MustCompile(`serving prefix "toolbus" on (\S+)`))
	op, err := natsconn.Config{URLs: m[1], NKey: security.SeedFile(dir, "operator"), InboxPrefix: "_INBOX.operator"}.Connect("op")
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if err := client.New(op, client.Config{}).Admin(t.Context(), "session.mode", "s1", map[string]string{"mode": "bypass"}, nil); err != nil {
		t.Fatal(err)
	}
	nc, err := natsconn.Config{URLs: m[1], NKey: security.SeedFile(dir, "agent"), InboxPrefix: "_INBOX.agent"}.Connect("agent")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl := client.New(nc, client.Config{})
	var reply *bus.Reply
	testkit.CheckFor(t, testkit.SetupWait, 10*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), testkit.SetupWait)
		defer cancel()
		reply, err = cl.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "shell", Input: json.RawMessage(`{"command":"id -u"}`)}}})
		return err
	})
	if len(reply.Results) != 1 || len(reply.Results[0].Output) == 0 {
		t.Fatalf("reply %+v", reply)
	}
	text := reply.Results[0].Output[0].Text
	if !strings.HasPrefix(text, "Exit code: 0\nstdout:\n") || strings.HasPrefix(text, "Exit code: 0\nstdout:\n0\n") {
		t.Fatalf("id -u: %q", text)
	}
	if !strings.Contains(stderr.String(), "not writable by the shell's user") {
		t.Errorf("no warning about the workdir:\n%s", stderr.String())
	}
}

// TestSkillScriptAsShellUser: a root router with a private --data
// directory, --workdir and --skills runs a skill's script as nobody, its
// shell user (the README's "Give the agent a skill" step 5, which failed
// with Permission denied while the files lay under --data), and removes
// the skill's files at stop.
func TestSkillScriptAsShellUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	work, src := t.TempDir(), filepath.Join(t.TempDir(), "notes")
	for _, d := range []string{filepath.Dir(work), work} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, s := range map[string]string{"SKILL.md": "---\nname: notes\ndescription: d\n---\nRun scripts/who.sh.\n",
		"scripts/who.sh": "id -u\ncat \"$SKILL_DIR/facts.txt\"\n", "facts.txt": "a fact\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var skillDir string
	t.Cleanup(func() { // after the router's stop (clean-ups run last first)
		if _, err := os.Lstat(filepath.Dir(skillDir)); skillDir == "" || !os.IsNotExist(err) {
			t.Errorf("the skill's files at stop: %q %v", skillDir, err)
		}
	})
	data := filepath.Join(t.TempDir(), "data")
	m, stderr := startRun(t, []string{"--listen", "127.0.0.1:-1", "--data", data, "--heartbeat", "500ms",
		"--workdir", work, "--skills", filepath.Dir(src)}, regexp.MustCompile(`serving prefix "toolbus" on (\S+)`))
	nc, err := natsconn.Config{URLs: m[1]}.Connect("agent")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl := client.New(nc, client.Config{})
	if err := cl.Admin(t.Context(), "session.mode", "s1", map[string]string{"mode": "bypass"}, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), testkit.SetupWait)
	defer cancel()
	reply, err := cl.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "shell",
		Input: json.RawMessage(`{"command":"sh $SKILL_DIR/scripts/who.sh","skill":"notes"}`)}}})
	if err != nil || len(reply.Results) != 1 || len(reply.Results[0].Output) == 0 {
		t.Fatalf("reply %+v %v\n%s", reply, err, stderr.String())
	}
	text := reply.Results[0].Output[0].Text
	d := regexp.MustCompile(`files are in (\S+) \(\$SKILL_DIR\)`).FindStringSubmatch(text)
	if d == nil || !strings.Contains(text, "Exit code: 0\nstdout:\n65534\na fact\n") || strings.HasPrefix(d[1], data) {
		t.Fatalf("the skill's script as nobody: %q", text)
	}
	skillDir = d[1]
}
