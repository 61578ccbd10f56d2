package main

import (
	"context"
	"encoding/json"
	"errors"
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
)

// TestSecondRouterOtherShellServesNothing: a second router joins the bus
// with other shell flags (--shell-allow, --workdir). Its shell definition
// differs, the routers reject it, and its worker says so and serves no
// call: 6 of 6 shell calls run on the first router's (issue 26, item 3).
// --shell-as-root: the temporary directories are root's alone when the
// tests run as root (as nobody, the shell could not enter them).
// --heartbeat 2s: a worker stays live for three beats, so a beat late on a
// loaded machine does not leave the shell unserved for a moment (at 500ms
// CI at load 25 saw "no live worker" on call 4).
func TestSecondRouterOtherShellServesNothing(t *testing.T) {
	w1, w2 := t.TempDir(), t.TempDir()
	for dir, who := range map[string]string{w1: "first", w2: "second"} {
		if err := os.WriteFile(filepath.Join(dir, "marker"), []byte(who), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	serving := regexp.MustCompile(`serving prefix "toolbus" on (\S+)`)
	m, _ := startRun(t, []string{"--listen", "127.0.0.1:-1", "--data", filepath.Join(t.TempDir(), "data"), "--heartbeat", "2s",
		"--workdir", w1, "--shell-allow", "cat", "--shell-as-root"}, serving)
	url := m[1]
	_, stderr := startRun(t, []string{"--nats", url, "--heartbeat", "2s", "--workdir", w2, "--shell-allow", "cat,ls", "--shell-as-root"}, serving)
	testkit.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		s := stderr.String()
		if strings.Contains(s, "tool rejected by the routers") && strings.Contains(s, "tool=shell") &&
			strings.Contains(s, "they differ in description") {
			return nil
		}
		return errors.New("the second router did not say its shell was rejected")
	})
	nc, err := natsconn.Config{URLs: url}.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl := client.New(nc, client.Config{})
	if err := cl.Admin(t.Context(), "session.mode", "s1", map[string]string{"mode": "bypass"}, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		reply, err := cl.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c" + string(rune('0'+i)), Name: "shell",
			Input: json.RawMessage(`{"command":"cat marker"}`)}}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		res := reply.Results[0]
		if res.State != bus.StateSuccess || len(res.Output) == 0 || !strings.Contains(res.Output[0].Text, "first") || strings.Contains(res.Output[0].Text, "second") {
			t.Fatalf("call %d: %s %+v", i, res.State, res.Output)
		}
	}
}
