package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestCallWait: a call that parks prints its call id and the exact
// commands that answer it; with --wait the command follows it and prints
// its result once a confirmation comes from another connection.
func TestCallWait(t *testing.T) {
	d := newDeployment(t)
	runs := d.addWriteTool(t)
	stdout, stderr, stop := background(t, "call", "write", `{"v":3}`, "--wait", "--reply-id", "r-wait", "--session", "s-wait", "--nats", d.url)
	waitOutput(t, stdout, "waiting for 1 parked call(s)...")
	out := stdout.String()
	want := "write: parked for a confirmation, call call-r-wait\n  allow: toolbus confirm call-r-wait --session s-wait --reply r-wait --tool write [--remember]\n"
	if !strings.Contains(out, want) {
		t.Fatalf("call output:\n%s\nwant:\n%s", out, want)
	}
	cmd := regexp.MustCompile(`allow: toolbus (confirm .*) \[--remember\]`).FindStringSubmatch(out)
	args := append(strings.Fields(cmd[1]), "--nats", d.url)
	if _, _, err := exec(t.Context(), args...); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	waitOutput(t, stdout, "write: success\nwrote 3\n")
	if err := stop(); err != nil {
		t.Fatalf("call --wait: %v\nstderr: %s", err, stderr.String())
	}
	if runs.Load() != 1 {
		t.Fatalf("runs = %d", runs.Load())
	}
}

// TestCallInputFromFile: an input of 2 MiB comes from @FILE (a shell
// argument could not hold it) and reaches the tool whole.
func TestCallInputFromFile(t *testing.T) {
	x := xtest.Run(t, xtest.Config{Routers: 1, Heartbeat: testHeartbeat, Router: router.Config{Limits: router.Limits{MaxInputBytes: 4 << 20}}})
	_, err := x.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "size", Description: "Count the bytes of text.", ReadOnly: true},
			func(_ context.Context, _ *worker.Call, in struct {
				Text string `json:"text"`
			}) (string, error) {
				return strconv.Itoa(len(in.Text)), nil
			})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.WaitLive(t.Context(), "size"); err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("0123456789abcdef", 2<<20/16)
	input, _ := json.Marshal(map[string]string{"text": text})
	file := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(file, input, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := exec(t.Context(), "call", "size", "@"+file, "--nats", x.URL(0))
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if want := "size: success\n" + strconv.Itoa(len(text)) + "\n"; out != want {
		t.Fatalf("output %q, want %q", out, want)
	}
	if _, _, err := exec(t.Context(), "call", "size", "@"+file+".missing", "--nats", x.URL(0)); err == nil {
		t.Fatal("a missing @file was accepted")
	}
}

// TestCallBatch: --batch runs several calls in one batch, each with its
// own id.
func TestCallBatch(t *testing.T) {
	d := newDeployment(t)
	file := filepath.Join(t.TempDir(), "batch.json")
	body := `{"calls": [{"name": "echo", "input": {"text": "one"}}, {"id": "mine", "name": "echo", "input": {"text": "two"}}]}`
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := exec(t.Context(), "call", "--batch", file, "--json", "--reply-id", "rb", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	var reply bus.Reply
	if err := json.Unmarshal([]byte(out), &reply); err != nil {
		t.Fatal(err)
	}
	if len(reply.Results) != 2 || reply.Results[0].ID != "call-rb-1" || reply.Results[1].ID != "mine" ||
		reply.Results[0].Output[0].Text != "one" || reply.Results[1].Output[0].Text != "two" {
		t.Fatalf("reply %+v", reply.Results)
	}
	if _, _, err := exec(t.Context(), "call", "echo", "{}", "--batch", file, "--nats", d.url); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("--batch with a tool: %v", err)
	}
}

// TestWatchJSON: watch --json prints each event as one line of JSON.
func TestWatchJSON(t *testing.T) {
	d := newDeployment(t)
	stdout, stderr, stop := background(t, "watch", "--json", "--session", "w2", "--nats", d.url)
	waitOutput(t, stderr, "watching toolbus.events.w2")
	if _, err := d.client.Call(t.Context(), "w2", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: json.RawMessage(`{"text":"hi"}`)}}}); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, stdout, `"type":"io.toolbus.batch.done"`)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var e struct {
			Type      string `json:"type"`
			SessionID string `json:"sessionid"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.SessionID != "w2" || !strings.HasPrefix(e.Type, "io.toolbus.") {
			t.Fatalf("line %q: %v", line, err)
		}
	}
}

// TestGroupsPutRm: groups put stores a definition from YAML, the session
// lists it, groups rm removes it, and a bad definition is refused.
func TestGroupsPutRm(t *testing.T) {
	d := newDeployment(t)
	file := filepath.Join(t.TempDir(), "ops.yaml")
	if err := os.WriteFile(file, []byte("name: ops\ndescription: Deploy and roll back.\nscope: meta\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, err := exec(t.Context(), "groups", "put", file, "--nats", d.url); err != nil || out != "stored group ops\n" {
		t.Fatalf("put: %v %q", err, out)
	}
	out, _, err := exec(t.Context(), "groups", "--nats", d.url)
	if err != nil || !strings.Contains(out, "ops") {
		t.Fatalf("groups: %v\n%s", err, out)
	}
	if out, _, err := exec(t.Context(), "groups", "rm", "ops", "--nats", d.url); err != nil || out != "removed group ops\n" {
		t.Fatalf("rm: %v %q", err, out)
	}
	if err := os.WriteFile(file, []byte("name: ops\nscope: sideways\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := exec(t.Context(), "groups", "put", file, "--nats", d.url); err == nil || !strings.Contains(err.Error(), "bad_request") {
		t.Fatalf("a bad group: %v", err)
	}
}

// TestCallWaitSpeaks: call --wait on an external tool that asks first says
// when the confirmed call moves on to wait for its answer, with the
// command that gives it, and then prints the answer.
func TestCallWaitSpeaks(t *testing.T) {
	d := newDeployment(t)
	def := bus.ToolDef{Name: "ext_ask", Description: "Asks, then a person answers.", External: true}
	d.registerDefs(t, def)
	// registerDefs allows every tool; ask instead, so the call parks twice.
	def.Permission, def.ConcurrencySafe, def.InputSchema = bus.PermissionAsk, true, json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)
	e, err := bus.NewEvent(bus.TypeRegister, "test/registrar", bus.Register{Worker: "registrar", Tools: []bus.ToolDef{def}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Msg(d.client.Subjects().Workers.Register(def.Name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.conn(t).RequestMsgWithContext(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, stop := background(t, "call", "ext_ask", `{"q":"x"}`, "--wait", "--reply-id", "r-speak", "--session", "s-speak", "--nats", d.url)
	waitOutput(t, stdout, "waiting for 1 parked call(s)...")
	if _, _, err := exec(t.Context(), "confirm", "call-r-speak", "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, stderr, "call call-r-speak of ext_ask now waits for its external result: toolbus answer call-r-speak '<output>'\n")
	if _, _, err := exec(t.Context(), "answer", "call-r-speak", "done by hand", "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, stdout, "ext_ask: success\ndone by hand\n")
	if err := stop(); err != nil {
		t.Fatalf("call --wait: %v\nstderr: %s", err, stderr.String())
	}
}
