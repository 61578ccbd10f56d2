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
