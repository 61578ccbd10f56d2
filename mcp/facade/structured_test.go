package facade

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/client"
)

// TestStructureText: a tool with an output schema whose result is one JSON
// object as text gets it as structuredContent (structurer.wrap); nothing
// else changes.
func TestStructureText(t *testing.T) {
	img := mcp.NewImageContent("aGk=", "image/png")
	for _, tc := range []struct {
		name string
		res  *mcp.CallToolResult
		want string // structuredContent as JSON; "" none
	}{
		{"object", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(`{"n":3}`)}}, `{"n":3}`},
		{"object with spaces", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(" {\"n\": 3}\n")}}, `{"n":3}`},
		{"array", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(`[1]`)}}, ""},
		{"plain text", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(`three`)}}, ""},
		{"broken JSON", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(`{"n":`)}}, ""},
		{"error", &mcp.CallToolResult{IsError: true, Content: []mcp.Content{mcp.NewTextContent(`{"n":3}`)}}, ""},
		{"two blocks", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(`{"n":3}`), mcp.NewTextContent(`{}`)}}, ""},
		{"not text", &mcp.CallToolResult{Content: []mcp.Content{img}}, ""},
		{"empty", &mcp.CallToolResult{Content: []mcp.Content{}}, ""},
		{"already structured", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(`{"n":3}`)}, StructuredContent: json.RawMessage(`{"m":1}`)}, `{"m":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(tc.res.Content)
			wrapped := structurer{session: "s1"}.wrap(func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) { return tc.res, nil })
			if _, err := wrapped(t.Context(), mcp.CallToolRequest{}); err != nil {
				t.Fatal(err)
			}
			got := ""
			if tc.res.StructuredContent != nil {
				raw, _ := json.Marshal(tc.res.StructuredContent)
				got = string(raw)
			}
			if got != tc.want || len(tc.res.Content) != before {
				t.Fatalf("structuredContent %q (content %d blocks), want %q (%d)", got, len(tc.res.Content), tc.want, before)
			}
		})
	}
}

// fakeOutputs serves stored outputs from memory, as P.outputs.<session>
// would to that session only.
type fakeOutputs map[string]string

func (f fakeOutputs) FetchSession(_ context.Context, session, ref string) (*client.Output, error) {
	r, err := offload.ParseRef(ref)
	if err != nil || r.Session() != session {
		return nil, errors.New("not this session's")
	}
	b, ok := f[ref]
	if !ok {
		return nil, errors.New("not found")
	}
	return offload.NewObject(int64(len(b)), "application/json", r.Digest, func(off int64) ([]byte, error) {
		if off >= int64(len(b)) {
			return nil, io.EOF
		}
		return []byte(b[off:]), nil
	}), nil
}

// TestRestoreStructured: an offloaded result of a tool with an
// outputSchema gets its stored JSON object back as structuredContent; a
// stored part too large, not an object or of another session makes it an
// isError result naming why (issue 29, F1).
func TestRestoreStructured(t *testing.T) {
	store := fakeOutputs{}
	put := func(name, data string) string {
		ref := offload.Ref{Bucket: "P_outputs", Name: name, Digest: fmt.Sprintf("%x", sha256.Sum256([]byte(data)))}.String()
		store[ref] = data
		return ref
	}
	obj, text, arr := put("s1.r.c.t.1", `{"lines":["a"]}`), put("s1.r.c.t.0", "long text"), put("s1.r.c.t.2", `[1,2]`)
	big, other := put("s1.r.c.t.3", `{"x":"`+strings.Repeat("y", 200)+`"}`), put("s2.r.c.t.1", `{"n":1}`)
	link := func(uri, media string) mcp.Content { return mcp.NewResourceLink(uri, uri, "", media) }
	preview := mcp.NewTextContent("long t…\n[stored]")
	for _, tc := range []struct {
		name    string
		content []mcp.Content
		want    string // structuredContent; "" none
		isError bool
	}{
		{"bridged: text and JSON stored", []mcp.Content{preview, link(text, "text/plain; charset=utf-8"), link(obj, "application/json")}, `{"lines":["a"]}`, false},
		{"worker: its JSON text stored", []mcp.Content{mcp.NewTextContent(`{"lines":…`), link(obj, "text/plain; charset=utf-8")}, `{"lines":["a"]}`, false},
		{"too large", []mcp.Content{link(big, "application/json")}, "", true},
		{"an array", []mcp.Content{link(arr, "application/json")}, "", true},
		{"an image only", []mcp.Content{link(obj, "image/png")}, "", true},
		{"another session's", []mcp.Content{link(other, "application/json")}, "", false},
		{"not offloaded", []mcp.Content{mcp.NewTextContent("plain")}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &mcp.CallToolResult{Content: tc.content}
			n := len(tc.content)
			structurer{session: "s1", fetch: store, max: 100}.restore(t.Context(), res)
			got := ""
			if res.StructuredContent != nil {
				raw, _ := json.Marshal(res.StructuredContent)
				got = string(raw)
			}
			if got != tc.want || res.IsError != tc.isError {
				t.Fatalf("structuredContent %q isError %v, want %q %v: %+v", got, res.IsError, tc.want, tc.isError, res.Content)
			}
			if tc.isError && (len(res.Content) != n+1 || !strings.Contains(res.Content[0].(mcp.TextContent).Text, ReadOutputTool)) {
				t.Fatalf("the error does not say where the output is: %+v", res.Content)
			}
		})
	}
}
