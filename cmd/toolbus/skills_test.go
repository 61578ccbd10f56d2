package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

func writeSkillFile(t *testing.T, dir, name, desc string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	md := "---\nname: " + name + "\ndescription: " + desc + "\n---\n# " + name + "\nSteps.\n"
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
}

func describeOn(r *router.Router, user, name string) string {
	for _, s := range r.Skills().Skills(user) {
		if s.Name == name {
			return s.Description
		}
	}
	return ""
}

func TestSkillsPushSeenBySecondRouter(t *testing.T) {
	d := newDeployment(t)
	// A second router, started before the push: it must see it without a restart.
	r2, err := d.x.AddRouter(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "release-notes")

	// An invalid skill: a readable error, and nothing stored.
	writeSkillFile(t, dir, "release-notes", "")
	_, _, err = exec(t.Context(), "skills", "push", dir, "--nats", d.url)
	if err == nil || !strings.Contains(err.Error(), "not pushed: skill "+filepath.ToSlash(dir)+"/SKILL.md: description is empty") {
		t.Fatalf("invalid push: %v", err)
	}
	out, _, err := exec(t.Context(), "skills", "ls", "--nats", d.url)
	if err != nil || out != "no skills\n" {
		t.Fatalf("ls after a refused push: %q %v", out, err)
	}

	writeSkillFile(t, dir, "release-notes", "Write release notes.")
	out, _, err = exec(t.Context(), "skills", "push", dir, "--nats", d.url)
	if err != nil || !strings.HasPrefix(out, "pushed skill release-notes (sha256:") {
		t.Fatalf("push: %q %v", out, err)
	}
	wait := func(user, want string) {
		t.Helper()
		testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
			if got := describeOn(r2, user, "release-notes"); got != want {
				return fmt.Errorf("second router: %q, want %q", got, want)
			}
			return nil
		})
	}
	wait("", "Write release notes.")
	writeSkillFile(t, dir, "release-notes", "Write release notes, v2.")
	if _, _, err := exec(t.Context(), "skills", "push", dir, "--user", "alice", "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	wait("alice", "Write release notes, v2.")
	wait("bob", "Write release notes.")
	// skills.list is answered by either router; the first one's watch may
	// deliver the push a moment after the second's.
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		out, _, err := exec(t.Context(), "skills", "ls", "--nats", d.url)
		if err != nil || strings.Count(out, "\n") != 2 || !strings.Contains(out, "release-notes [user alice]  Write release notes, v2.") {
			return fmt.Errorf("ls: %q %v", out, err)
		}
		// Aligned: both descriptions start in the same column.
		if lines := strings.Split(out, "\n"); strings.Index(lines[0], "Write release notes") != strings.Index(lines[1], "Write release notes") {
			return fmt.Errorf("ls not aligned:\n%s", out)
		}
		return nil
	})
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		out, _, err := exec(t.Context(), "skills", "show", "release-notes", "--user", "alice", "--nats", d.url)
		if err != nil || !strings.Contains(out, "  user: alice\n") {
			return fmt.Errorf("show: %q %v", out, err)
		}
		return nil
	})

	if out, _, err := exec(t.Context(), "skills", "rm", "release-notes", "--user", "alice", "--nats", d.url); err != nil || out != "removed skill release-notes for user alice\n" {
		t.Fatalf("rm: %q %v", out, err)
	}
	wait("alice", "Write release notes.")
	if _, _, err := exec(t.Context(), "skills", "rm", "release-notes", "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	wait("", "")
	if _, _, err := exec(t.Context(), "skills", "rm", "release-notes", "--nats", d.url); err == nil || !strings.Contains(err.Error(), "no skill release-notes") {
		t.Fatalf("second rm: %v", err)
	}
}

// TestBuiltinWriteParksForConfirmation: in the default permission mode a
// write_file parks for a person's confirmation, and runs after toolbus confirm.
func TestBuiltinWriteParksForConfirmation(t *testing.T) {
	d := newDeployment(t)
	base := t.TempDir()
	w, err := worker.New(d.conn(t), worker.Config{Heartbeat: testHeartbeat})
	if err != nil {
		t.Fatal(err)
	}
	if err := builtin.RegisterWith(t.Context(), w, builtin.Config{WorkDir: base}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Drain(ctx)
	})
	d.waitListed(t, "read_file", "write_file", "edit_file", "shell", "todo_write")
	events := d.watchSession(t, "w1")

	p := d.park(t, "w1", "r1", "write_file", `{"path":"notes.txt","content":"hello\n"}`, bus.KindConfirm)
	if p.Name != "write_file" {
		t.Fatalf("parked %+v", p)
	}
	if _, err := os.Stat(filepath.Join(base, "notes.txt")); !os.IsNotExist(err) {
		t.Fatal("the write ran before its confirmation")
	}
	if _, _, err := exec(t.Context(), "confirm", "c1", "--session", "w1", "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	res := waitDone(t, events, "r1")
	if len(res) != 1 || res[0].State != bus.StateSuccess || res[0].Output[0].Text != "Created notes.txt (6 bytes)." {
		t.Fatalf("results %+v", res)
	}
	if b, err := os.ReadFile(filepath.Join(base, "notes.txt")); err != nil || string(b) != "hello\n" {
		t.Fatalf("file %q %v", b, err)
	}
	// Reads never ask; the read is recorded in the session for any worker.
	reply, err := d.client.Call(t.Context(), "w1", bus.Batch{Calls: []bus.Call{{ID: "c2", Name: "read_file", Input: json.RawMessage(`{"path":"notes.txt"}`)},
		{ID: "c3", Name: "todo_write", Input: json.RawMessage(`{"todos":[{"content":"Write notes","status":"completed"},{"content":"Review","status":"in_progress","priority":"high"}]}`)}}},
		client.WithReplyID("r2"))
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Results) != 2 || reply.Results[0].Output[0].Text != "     1\thello" ||
		reply.Results[1].Output[0].Text != "1 open todo(s):\n- [x] Write notes\n- [~] Review (priority: high)" {
		t.Fatalf("reply %+v", reply)
	}
	out, _, err := exec(t.Context(), "session", "show", "--json", "--session", "w1", "--nats", d.url)
	if err != nil || !strings.Contains(out, `"todos"`) || !strings.Contains(out, `"Review"`) || !strings.Contains(out, `"file_reads"`) {
		t.Fatalf("session state: %v\n%s", err, out)
	}
}
