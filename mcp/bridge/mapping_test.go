package bridge

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, file, err string
	}{
		{"stdio", "servers: [{name: fs, command: srv, args: [-x], env: {A: b}, cwd: /tmp, group: files, timeout: 2s}]", ""},
		{"http by default", "servers: [{name: web, url: 'http://x/mcp', headers: {Authorization: t}}]", ""},
		{"sse", `{"servers": [{"name": "old", "transport": "sse", "url": "http://x/sse"}]}`, ""},
		{"overlap", "servers: [{name: fs, command: srv, enable_tools: [a, b], disable_tools: [b]}]", `tool "b" is in both enable_tools and disable_tools`},
		{"unknown member", "servers: [{name: fs, command: srv, enable: [a]}]", `unknown field "enable"`},
		{"bad name", "servers: [{name: 'f s', command: srv}]", "name must match"},
		{"no command", "servers: [{name: fs, transport: stdio}]", "needs a command"},
		{"no url", "servers: [{name: fs, transport: sse}]", "needs a url"},
		{"bad transport", "servers: [{name: fs, transport: ws, url: 'ws://x'}]", "is not stdio, sse or http"},
		{"bad timeout", "servers: [{name: fs, command: srv, timeout: soon}]", "not a positive duration"},
		{"twice", "servers: [{name: fs, command: a}, {name: fs, command: b}]", "listed twice"},
		{"stdio with url", "servers: [{name: fs, command: a, url: 'http://x'}]", "takes no url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.file))
			if tc.err == "" && err != nil {
				t.Fatal(err)
			}
			if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("want error with %q, got %v", tc.err, err)
			}
		})
	}
}

func TestToolName(t *testing.T) {
	if got := ToolName("fs", "read.file"); got != "mcp__fs__readxfile" {
		t.Fatalf("got %q", got)
	}
	if got := ToolName("fs", "list-dir_2"); got != "mcp__fs__list-dir_2" {
		t.Fatalf("got %q", got)
	}
	a := ToolName("server", longTool)
	b := ToolName("server", longTool+"2")
	if len(a) != 64 || len(b) != 64 || a == b || !bus.ValidName(a) {
		t.Fatalf("shortened names %q %q", a, b)
	}
	if a != ToolName("server", longTool) || !strings.HasPrefix(a, "mcp__server__a_tool_with") {
		t.Fatalf("shortening is not stable: %q", a)
	}
	if got := ToolName("s", "ü/é"); got != "mcp__s__xxx" && got != "mcp__s__xx" {
		// One x per character (rune), not per byte.
		t.Fatalf("got %q", got)
	}
}

// TestDefinitionAnnotations: hints the server did not send stay absent, and
// destructiveHint is never derived from readOnlyHint.
func TestDefinitionAnnotations(t *testing.T) {
	s := &Server{Name: "s", Command: "x"}
	if err := s.validate(); err != nil {
		t.Fatal(err)
	}
	f := false
	for _, tc := range []struct {
		tool mcp.Tool
		want *bus.MCPAnnotations
	}{
		{mcp.Tool{Name: "bare"}, nil},
		{mcp.Tool{Name: "t", Title: "Top", Annotations: mcp.ToolAnnotation{Title: "Inner", DestructiveHint: &f}}, &bus.MCPAnnotations{Title: "Inner", DestructiveHint: &f}},
	} {
		d, err := Definition(s, tc.tool)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(d.MCP.Annotations, tc.want) {
			t.Errorf("%s: annotations %+v, want %+v", tc.tool.Name, d.MCP.Annotations, tc.want)
		}
		if tc.tool.Title != "" && d.Title != tc.tool.Title {
			t.Errorf("%s: title %q", tc.tool.Name, d.Title)
		}
	}
	d, _ := Definition(s, mcp.Tool{Name: "task", Execution: &mcp.ToolExecution{TaskSupport: mcp.TaskSupportRequired}})
	if d.MCP.TaskSupport != "required" {
		t.Errorf("task support: %+v", d.MCP)
	}
}

// TestResultAnnotations: annotation values the protocol does not allow are
// left out instead of failing the result.
func TestResultAnnotations(t *testing.T) {
	bad := 7.0
	c := mcp.NewTextContent("x")
	c.Annotations = &mcp.Annotations{Audience: []mcp.Role{"robot", mcp.RoleUser}, Priority: &bad, LastModified: "soon"}
	r := Result(&mcp.CallToolResult{Content: []mcp.Content{c}})
	if a := r.Output[0].Annotations; a == nil || len(a.Audience) != 1 || a.Audience[0] != "user" || a.Priority != nil || a.LastModified != "" {
		t.Fatalf("annotations: %+v", a)
	}
	c.Annotations = &mcp.Annotations{Audience: []mcp.Role{"robot"}}
	if a := Result(&mcp.CallToolResult{Content: []mcp.Content{c}}).Output[0].Annotations; a != nil {
		t.Fatalf("nothing valid left: %+v", a)
	}
}

func TestUnknownNames(t *testing.T) {
	s := &Server{EnableTools: []string{"echo", "longRunningOperation"}, DisableTools: []string{"gone", "echo2"}}
	got := s.unknownNames([]mcp.Tool{{Name: "echo"}, {Name: "echo2"}})
	if !reflect.DeepEqual(got, []string{"gone", "longRunningOperation"}) {
		t.Fatalf("got %v", got)
	}
	if got := (&Server{}).unknownNames(nil); got != nil {
		t.Fatalf("none configured: %v", got)
	}
}

// TestExampleConfig: examples/mcp/servers.yaml loads.
func TestExampleConfig(t *testing.T) {
	f, err := Load("../../examples/mcp/servers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Servers) != 1 || !slices.Contains(f.Servers[0].DisableTools, "get-env") {
		t.Fatalf("%+v", f.Servers)
	}
	for _, n := range f.Servers[0].DisableTools {
		if !slices.Contains(everythingTools, n) {
			t.Errorf("disable_tools names %q, which server-everything 2026.8.31 does not have", n)
		}
	}
}
