package bridge

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// everythingTools are the tools of @modelcontextprotocol/server-everything
// 2026.8.31 (examples/mcp/package.json) for a client with roots,
// elicitation (form and URL) and sampling, and without the tasks
// capability for requests (which its two *-async tools need).
var everythingTools = []string{
	"echo", "get-annotated-message", "get-env", "get-resource-links", "get-resource-reference",
	"get-structured-content", "get-sum", "get-tiny-image", "gzip-file-as-resource", "toggle-simulated-logging",
	"toggle-subscriber-updates", "trigger-long-running-operation",
	"get-roots-list", "trigger-elicitation-request", "trigger-url-elicitation", "trigger-sampling-request",
	"simulate-research-query",
}

// everythingServer installs the pinned server-everything with npm ci into
// a cache directory (once per lockfile) and returns the path of its
// entry point; it skips when node or npm is missing or npm fails
// (offline).
func everythingServer(t *testing.T) (node, entry string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm not found")
	}
	pkg, err1 := os.ReadFile("../../examples/mcp/package.json")
	lock, err2 := os.ReadFile("../../examples/mcp/package-lock.json")
	if err1 != nil || err2 != nil {
		t.Fatalf("examples/mcp: %v %v", err1, err2)
	}
	sum := sha256.Sum256(append(pkg, lock...))
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "toolbus-test", "everything-"+hex.EncodeToString(sum[:6]))
	entry = filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	if _, err := os.Stat(entry); err == nil {
		return node, entry
	}
	_ = os.MkdirAll(filepath.Dir(dir), 0o755)
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-*")
	if err != nil {
		t.Skipf("no cache directory: %v", err)
	}
	defer os.RemoveAll(tmp)
	_ = os.WriteFile(filepath.Join(tmp, "package.json"), pkg, 0o644)
	_ = os.WriteFile(filepath.Join(tmp, "package-lock.json"), lock, 0o644)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("npm ci failed (offline?): %v\n%s", err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(entry); serr != nil { // another run may have won
			t.Skipf("cache: %v", err)
		}
	}
	return node, entry
}

// TestEverything bridges the MCP reference server
// @modelcontextprotocol/server-everything (pinned): all 17 of its tools
// are offered, structured content arrives once (one JSON data block, the
// text as sent), an elicitation is answered on the bus, roots are the
// configured ones, sampling is refused, and the task-only research tool
// runs as a task.
func TestEverything(t *testing.T) {
	node, entry := everythingServer(t)
	e := newEnv(t)
	work := t.TempDir()
	b := e.bridge(&File{Servers: []Server{{Name: "everything", Command: node, Args: []string{entry, "stdio"}, Timeout: "60s"}}},
		func(c *Config) { c.Roots = []string{work} })
	deadline := time.Now().Add(time.Minute)
	for len(b.Tools("everything")) < len(everythingTools) {
		if time.Now().After(deadline) {
			t.Fatalf("tools: %v", b.Tools("everything"))
		}
		select {
		case <-t.Context().Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	var want []string
	for _, n := range everythingTools {
		want = append(want, ToolName("everything", n))
	}
	got := b.Tools("everything")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("tools:\n got %v\nwant %v", got, want)
	}
	defs := e.waitTools(want, nil)
	if d := defs["mcp__everything__simulate-research-query"]; d.MCP.TaskSupport != "required" {
		t.Errorf("research task support: %+v", d.MCP)
	}
	if d := defs["mcp__everything__trigger-elicitation-request"]; d.Title != "Trigger Elicitation Request Tool" ||
		d.MCP.Annotations == nil || d.MCP.Annotations.DestructiveHint == nil || *d.MCP.Annotations.DestructiveHint {
		t.Errorf("title and annotations: %q %+v", d.Title, d.MCP.Annotations)
	}

	// Structured content once: the text block as sent, one JSON data block.
	r := e.call("mcp__everything__get-structured-content", map[string]any{"location": "Chicago"})
	var texts, data []bus.Block
	for _, bl := range r.Output {
		if bl.Type == bus.BlockText {
			texts = append(texts, bl)
		} else {
			data = append(data, bl)
		}
	}
	if r.State != bus.StateSuccess || len(texts) != 1 || len(data) != 1 || data[0].MediaType != "application/json" {
		t.Fatalf("structured content: %+v", r)
	}
	js, _ := base64.StdEncoding.DecodeString(data[0].Data)
	var a, b2 map[string]any
	if json.Unmarshal(js, &a) != nil || json.Unmarshal([]byte(texts[0].Text), &b2) != nil || a["temperature"] != b2["temperature"] {
		t.Fatalf("structured %s vs text %s", js, texts[0].Text)
	}

	// An elicitation answered on the bus.
	ev, reply := e.publish("mcp__everything__trigger-elicitation-request", "el1")
	q := nextParked(t, ev)
	if q.call.Name != "mcp__everything__elicit" || q.call.Kind != bus.KindExternal || !strings.Contains(string(q.input.RequestedSchema), `"name"`) {
		t.Fatalf("parked: %+v %+v", q.call, q.input)
	}
	e.answer(q, bus.Answer{State: bus.StateSuccess, Output: bus.Text(`{"action":"accept","content":{"name":"Ada Lovelace","check":true,"integer":7}}`)})
	if r := resultOf(t, ev, reply, "el1"); r.State != bus.StateSuccess || !strings.Contains(text(r), "Name: Ada Lovelace") {
		t.Fatalf("elicitation: %+v", r)
	}

	// Roots: the configured ones only.
	root := (&url.URL{Scheme: "file", Path: filepath.ToSlash(work)}).String()
	if r := e.call("mcp__everything__get-roots-list", map[string]any{}); !strings.Contains(text(r), root) {
		t.Errorf("roots: %s (want %s)", text(r), root)
	}
	// Sampling: refused, with the reason.
	if r := e.call("mcp__everything__trigger-sampling-request", map[string]any{"prompt": "hi"}); !strings.Contains(text(r), "sampling is refused") {
		t.Errorf("sampling: %+v", r)
	}
	// The task-only tool: one bus call.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rep, err := e.client.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "rq", Name: "mcp__everything__simulate-research-query",
		Input: json.RawMessage(`{"topic":"tides"}`)}}})
	if err != nil || len(rep.Results) != 1 || rep.Results[0].State != bus.StateSuccess || !strings.Contains(text(rep.Results[0]), "tides") {
		t.Fatalf("research: %+v %v", rep, err)
	}
	// An ambiguous topic: the task needs input, its elicitation (delivered
	// through tasks/result) parks on the bus, and the answer completes it.
	ev, reply = e.publish2("mcp__everything__simulate-research-query", "rq2", map[string]any{"topic": "python", "ambiguous": true})
	q = nextParked(t, ev)
	if q.call.Name != "mcp__everything__elicit" || !strings.Contains(string(q.input.RequestedSchema), "snake") {
		t.Fatalf("research question: %+v", q.input)
	}
	e.answer(q, bus.Answer{State: bus.StateSuccess, Output: bus.Text(`{"interpretation":"snake"}`)})
	if r := resultOf(t, ev, reply, "rq2"); r.State != bus.StateSuccess || !strings.Contains(strings.ToLower(text(r)), "snake") {
		t.Fatalf("ambiguous research: %+v", r)
	}
}
