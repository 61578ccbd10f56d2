package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

// TestCallShowsStoredOutputAndFetch: `toolbus call` prints a stored
// output as its reference with the fetch hint, and `toolbus fetch` prints
// it, or saves it with -o, byte for byte; a bad or unknown reference is a
// clear error.
func TestCallShowsStoredOutputAndFetch(t *testing.T) {
	d := newDeployment(t)
	text := strings.Repeat("0123456789abcdef", 100<<10) // 1.6 MiB: above the 1 MiB inline limit
	_, err := d.x.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "big", Description: "A large text.", ReadOnly: true},
			func(context.Context, *worker.Call, struct{}) (string, error) { return text, nil })
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.x.WaitLive(t.Context(), "big"); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := exec(t.Context(), "call", "big", "--nats", d.url)
	if err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, errOut)
	}
	m := regexp.MustCompile(`\[data text/plain; charset=utf-8, 1638400 bytes, stored as (nats-object://toolbus_outputs/\S+); fetch it with: toolbus fetch (\S+)\]`).FindStringSubmatch(out)
	if m == nil || m[1] != m[2] {
		t.Fatalf("no reference with a hint in:\n%.3000s", out)
	}
	ref := m[1]
	got, errOut, err := exec(t.Context(), "fetch", ref, "--nats", d.url)
	if err != nil || got != text {
		t.Fatalf("fetch to stdout: %d bytes, equal %v, %v %s", len(got), got == text, err, errOut)
	}
	file := filepath.Join(t.TempDir(), "out.txt")
	if _, errOut, err = exec(t.Context(), "fetch", ref, "-o", file, "--nats", d.url); err != nil {
		t.Fatalf("fetch -o: %v %s", err, errOut)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != text {
		t.Fatalf("saved file: %d bytes, %v", len(b), err)
	}
	if !strings.Contains(errOut, "1638400 bytes") {
		t.Errorf("stderr %q", errOut)
	}
	// --direct reads the object store itself (an operator's read), and
	// --session names the session to ask.
	if got, errOut, err := exec(t.Context(), "fetch", "--direct", ref, "--nats", d.url); err != nil || got != text {
		t.Fatalf("fetch --direct: %d bytes, %v %s", len(got), err, errOut)
	}
	if _, _, err := exec(t.Context(), "fetch", "--session", "other", ref, "--nats", d.url); err == nil || !strings.Contains(err.Error(), "no output") {
		t.Errorf("fetch in another session: %v", err)
	}
	noDigest, _, _ := strings.Cut(ref, "#")
	for _, bad := range []string{"https://example.com/x", "nats-object://toolbus_outputs/nope", noDigest} {
		if _, _, err := exec(t.Context(), "fetch", bad, "-o", filepath.Join(t.TempDir(), "x"), "--nats", d.url); err == nil {
			t.Errorf("fetch %s succeeded", bad)
		}
	}
	if _, _, err := exec(t.Context(), "fetch", "--nats", d.url); err == nil || !strings.Contains(err.Error(), "one reference") {
		t.Errorf("fetch without a reference: %v", err)
	}
}
