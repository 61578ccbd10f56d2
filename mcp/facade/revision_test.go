package facade

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

// richResult is a result with every kind of content and annotation.
func richResult() *mcp.CallToolResult {
	prio, size := 0.5, int64(42)
	ann := &mcp.Annotations{Audience: []mcp.Role{mcp.RoleUser}, Priority: &prio, LastModified: "2026-12-01T10:00:00Z"}
	text := mcp.NewTextContent("hello")
	text.Annotations = ann
	link := mcp.NewResourceLink("file:///a.txt", "a", "The a file.", "text/plain")
	link.Size = &size
	link.Annotations = ann
	return &mcp.CallToolResult{Content: []mcp.Content{text, link, mcp.NewAudioContent(base64.StdEncoding.EncodeToString([]byte("wav!")), "audio/wav"),
		mcp.NewImageContent("aW1n", "image/png")}, StructuredContent: map[string]any{"n": 1}}
}

// TestDowngradeResult: what each revision receives of one result.
func TestDowngradeResult(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    string
	}{
		{mcp.ProtocolVersion20241105, `{"content":[{"annotations":{"audience":["user"],"priority":0.5},"type":"text","text":"hello"},` +
			`{"annotations":{"audience":["user"],"priority":0.5},"type":"text","text":"[resource file:///a.txt (name \"a\", text/plain, 42 bytes) — The a file. — read it with resources/read]"},` +
			`{"type":"text","text":"[audio (audio/wav, about 6 bytes) left out: this MCP revision has no audio content]"},` +
			`{"type":"image","data":"aW1n","mimeType":"image/png"}]}`},
		{mcp.ProtocolVersion20250326, `{"content":[{"annotations":{"audience":["user"],"priority":0.5},"type":"text","text":"hello"},` +
			`{"annotations":{"audience":["user"],"priority":0.5},"type":"text","text":"[resource file:///a.txt (name \"a\", text/plain, 42 bytes) — The a file. — read it with resources/read]"},` +
			`{"type":"audio","data":"d2F2IQ==","mimeType":"audio/wav"},` +
			`{"type":"image","data":"aW1n","mimeType":"image/png"}]}`},
		{mcp.ProtocolVersion20250618, ""},
		{mcp.ProtocolVersion20251125, ""},
		{mcp.ProtocolVersion20260728, ""},
	} {
		t.Run(tc.version, func(t *testing.T) {
			in := richResult()
			orig, _ := json.Marshal(in)
			got, _ := json.Marshal(downgradeResult(revisionOf(tc.version), in))
			want := tc.want
			if want == "" {
				want = string(orig) // unchanged
			}
			if string(got) != want {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
			if again, _ := json.Marshal(in); string(again) != string(orig) {
				t.Fatalf("the input was changed: %s", again)
			}
		})
	}
}

// TestDowngradeTools: the tool members and capabilities each revision
// receives.
func TestDowngradeTools(t *testing.T) {
	yes := true
	tool := mcp.Tool{Name: "t", Title: "T", Description: "d", RawInputSchema: json.RawMessage(`{"type":"object"}`),
		RawOutputSchema: json.RawMessage(`{"type":"object"}`), Annotations: mcp.ToolAnnotation{Title: "T", ReadOnlyHint: &yes},
		Execution: &mcp.ToolExecution{TaskSupport: mcp.TaskSupportOptional}}
	for _, tc := range []struct {
		version                               string
		title, output, annotations, execution bool
		tasks                                 bool
	}{
		{mcp.ProtocolVersion20241105, false, false, false, false, false},
		{mcp.ProtocolVersion20250326, false, false, true, false, false},
		{mcp.ProtocolVersion20250618, true, true, true, false, false},
		{mcp.ProtocolVersion20251125, true, true, true, true, true},
		{mcp.ProtocolVersion20260728, true, true, true, true, true},
	} {
		got := downgradeTools(revisionOf(tc.version), []mcp.Tool{tool})[0]
		raw, _ := json.Marshal(got)
		var m map[string]json.RawMessage
		_ = json.Unmarshal(raw, &m)
		_, hasTitle := m["title"]
		_, hasOutput := m["outputSchema"]
		_, hasExec := m["execution"]
		hasAnn := string(m["annotations"]) != "{}"
		if hasTitle != tc.title || hasOutput != tc.output || hasAnn != tc.annotations || hasExec != tc.execution {
			t.Errorf("%s: %s", tc.version, raw)
		}
		res := &mcp.InitializeResult{ProtocolVersion: tc.version, Capabilities: mcp.ServerCapabilities{Tasks: &mcp.TasksCapability{},
			Elicitation: &mcp.ElicitationCapability{}}}
		downgradeInit(res)
		if (res.Capabilities.Tasks != nil) != tc.tasks {
			t.Errorf("%s: tasks capability %v", tc.version, res.Capabilities.Tasks)
		}
		if res.Capabilities.Elicitation != nil {
			t.Errorf("%s: elicitation listed among the server's capabilities", tc.version)
		}
	}
	if tool.Title != "T" || tool.Execution == nil {
		t.Fatal("the input was changed")
	}
}

// TestOldHost: mcp-go's client pinned to 2024-11-05 gets no tasks
// capability, no tool title, outputSchema, annotations or execution, no
// structuredContent, and a stored output's link as text naming it; the
// same deployment gives a 2025-06-18 host the title, outputSchema and
// structuredContent.
func TestOldHost(t *testing.T) {
	e := newEnv(t)
	_, err := e.d.AddWorker(t.Context(), xtest.WorkerSpec{Config: worker.Config{InlineLimit: 4096}, Setup: func(w *worker.Worker) error {
		_ = w.Handle(bus.ToolDef{Name: "rich", Title: "Rich", Description: "Structured.", ReadOnly: true,
			InputSchema: json.RawMessage(`{"type":"object"}`), OutputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) {
				return &bus.ExecResult{State: bus.StateSuccess, Output: []bus.Block{{Type: bus.BlockText, Text: "n is 1"},
					{Type: bus.BlockData, MediaType: "application/json", Data: base64.StdEncoding.EncodeToString([]byte(`{"n":1}`))}}}, nil
			})
		return w.Handle(bus.ToolDef{Name: "blob", Description: "Stored.", ReadOnly: true, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) {
				return &bus.ExecResult{State: bus.StateSuccess, Output: []bus.Block{{Type: bus.BlockData, MediaType: "application/octet-stream",
					Data: base64.StdEncoding.EncodeToString(randomBytes(3, 8192))}}}, nil
			})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.WaitLive(t.Context(), "rich", "blob"); err != nil {
		t.Fatal(err)
	}

	old := e.connect(t, "s1", mcp.ProtocolVersion20241105, "alice")
	if caps := old.GetServerCapabilities(); caps.Tasks != nil || caps.Tools == nil || caps.Resources == nil {
		t.Fatalf("2024-11-05 capabilities: %+v", caps)
	}
	l, err := old.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range l.Tools {
		if tool.Title != "" || tool.RawOutputSchema != nil || tool.OutputSchema.Type != "" || tool.Execution != nil ||
			tool.Annotations != (mcp.ToolAnnotation{}) {
			t.Errorf("2024-11-05 tool %s: %+v", tool.Name, tool)
		}
	}
	r, err := call(t, old, "rich", map[string]any{}, false)
	if err != nil || r.StructuredContent != nil || textOf(r) != "n is 1" {
		t.Fatalf("2024-11-05 rich: %+v %v", r, err)
	}
	r, err = call(t, old, "blob", map[string]any{}, false)
	if err != nil || len(r.Content) != 1 || !strings.HasPrefix(textOf(r), "[resource nats-object://") {
		t.Fatalf("2024-11-05 blob: %+v %v", r, err)
	}

	cur := e.connect(t, "s1", mcp.ProtocolVersion20250618, "alice")
	if caps := cur.GetServerCapabilities(); caps.Tasks != nil {
		t.Fatalf("2025-06-18 has a tasks capability: %+v", caps.Tasks)
	}
	l, err = cur.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range l.Tools {
		if tool.Name == "rich" && (tool.Title != "Rich" || string(tool.RawOutputSchema) == "" && tool.OutputSchema.Type == "") {
			t.Errorf("2025-06-18 rich: %+v", tool)
		}
		if tool.Execution != nil {
			t.Errorf("2025-06-18 tool %s has execution", tool.Name)
		}
	}
	r, err = call(t, cur, "rich", map[string]any{}, false)
	if err != nil || r.StructuredContent == nil {
		t.Fatalf("2025-06-18 rich: %+v %v", r, err)
	}
	if l := storedURL(t, cur, "blob"); l == "" {
		t.Fatal("no link")
	}
	if caps := e.connect(t, "s1", mcp.ProtocolVersion20251125, "alice").GetServerCapabilities(); caps.Tasks == nil {
		t.Fatal("2025-11-25 has no tasks capability")
	}
}
