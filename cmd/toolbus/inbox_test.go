package main

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

// TestInboxCommand: toolbus inbox refuses a public address without a token
// of the user's own, and otherwise prints the page's URL with a generated
// token, which opens the page (and nothing opens without it).
func TestInboxCommand(t *testing.T) {
	d := newDeployment(t)
	_, _, err := exec(t.Context(), "inbox", "--listen", "0.0.0.0:0", "--nats", d.url)
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("public address without a token: %v", err)
	}
	stdout, _, stop := background(t, "inbox", "--listen", "127.0.0.1:0", "--nats", d.url)
	re := regexp.MustCompile(`open (http://127\.0\.0\.1:\d+)/\?code=([0-9a-f]{32}) .* give it the token ([0-9a-f]{32}),`)
	var m []string
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if m = re.FindStringSubmatch(stdout.String()); m == nil {
			return os.ErrNotExist
		}
		return nil
	})
	// The printed link opens the page; the API needs the token (in its
	// header, session 38), never in the address (session 39).
	for path, want := range map[string]int{"/api/calls": http.StatusUnauthorized, "/?code=" + m[2]: http.StatusOK, "/?token=" + m[3]: http.StatusBadRequest} {
		resp, err := http.Get(m[1] + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestParkedHistory: parked --history lists an answered call with who
// answered it, and when.
func TestParkedHistory(t *testing.T) {
	d := newDeployment(t)
	d.addWriteTool(t)
	events := d.watchSession(t, "s9")
	d.park(t, "s9", "r1", "write", `{"v":1}`, bus.KindConfirm)
	if _, _, err := exec(t.Context(), "confirm", "c1", "--session", "s9", "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	waitDone(t, events, "r1")
	out, _, err := exec(t.Context(), "parked", "--history", "--session", "s9", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`s9 +r1 +c1 +write +confirm +done +success +toolbus/cli via toolbus.approve.write +20\d\d-`).MatchString(out) {
		t.Fatalf("history:\n%s", out)
	}
}

// TestParkedHistoryHeldInput: a call that ended keeps a large input only by
// its digest (protocol 1.23, proposed): parked --history lists it, and its
// JSON shows the input as "held:<digest>".
func TestParkedHistoryHeldInput(t *testing.T) {
	d := newDeployment(t)
	type noteIn struct {
		Text string `json:"text"`
	}
	if _, err := d.x.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "write", Description: "Write a note."},
			func(context.Context, *worker.Call, noteIn) (string, error) { return "written", nil })
	}}); err != nil {
		t.Fatal(err)
	}
	events := d.watchSession(t, "s9")
	pad := strings.Repeat("p", 4<<10)
	d.park(t, "s9", "r2", "write", `{"text":"`+pad+`"}`, bus.KindConfirm)
	if _, _, err := exec(t.Context(), "cancel", "r2", "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	waitDone(t, events, "r2")
	out, _, err := exec(t.Context(), "parked", "--history", "--session", "s9", "--nats", d.url)
	if err != nil || !regexp.MustCompile(`s9 +r2 +c1 +write +confirm +cancelled +interrupted`).MatchString(out) {
		t.Fatalf("history: %v\n%s", err, out)
	}
	out, _, err = exec(t.Context(), "parked", "--history", "--json", "--session", "s9", "--nats", d.url)
	if err != nil || !regexp.MustCompile(`"input": "held:[A-Za-z0-9_-]{22}"`).MatchString(out) || strings.Contains(out, pad) {
		t.Fatalf("history --json: %v\n%.2000s", err, out)
	}
}
