package facade

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/mcp/bridge"
	"github.com/toolbus/toolbus/worker"
)

// resourceServer is an mcp-go server over streamable HTTP with one tool,
// two resources (text and blob) and a template; it returns its URL.
func resourceServer(t *testing.T) string {
	t.Helper()
	s := server.NewMCPServer("res", "1", server.WithResourceCapabilities(false, false))
	s.AddTool(mcp.NewTool("echo", mcp.WithString("text")), func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(r.GetString("text", "")), nil
	})
	s.AddResource(mcp.NewResource("file:///notes.txt", "notes", mcp.WithResourceDescription("The notes."), mcp.WithMIMEType("text/plain")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: "file:///notes.txt", MIMEType: "text/plain", Text: "remember"}}, nil
		})
	s.AddResource(mcp.NewResource("file:///logo.png", "logo", mcp.WithMIMEType("image/png")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.BlobResourceContents{URI: "file:///logo.png", MIMEType: "image/png", Blob: base64.StdEncoding.EncodeToString([]byte("\x89PNG"))}}, nil
		})
	s.AddResourceTemplate(mcp.NewResourceTemplate("file:///logs/{day}", "logs", mcp.WithTemplateDescription("A day's log.")),
		func(_ context.Context, r mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: r.Params.URI, MIMEType: "text/plain", Text: "log of " + r.Params.URI}}, nil
		})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// bridgeServer bridges the MCP server at url as server name and waits
// until its tools are live.
func (e *env) bridgeServer(t *testing.T, name, url string, tune ...func(*bridge.Config)) *bridge.Bridge {
	t.Helper()
	cfg := bridge.Config{Heartbeat: 500 * time.Millisecond, Ping: 100 * time.Millisecond, MinBackoff: 20 * time.Millisecond,
		MaxBackoff: 300 * time.Millisecond}
	for _, f := range tune {
		f(&cfg)
	}
	b, err := bridge.New(e.conn(t, xtest.RoleWorker), &bridge.File{Servers: []bridge.Server{{Name: name, Transport: bridge.TransportHTTP, URL: url}}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	return b
}

// storedWorker starts a worker whose tools return outputs large enough to
// be stored (its inline limit is 4 KiB): blob (64 KiB of bytes), text
// (UTF-8 text of 20 KiB) and huge (300 KiB of bytes).
func (e *env) storedWorker(t *testing.T, blob, text, huge []byte) {
	t.Helper()
	out := func(b []bus.Block) worker.Handler {
		return func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return &bus.ExecResult{State: bus.StateSuccess, Output: b}, nil
		}
	}
	data := func(b []byte) []bus.Block {
		return []bus.Block{{Type: bus.BlockData, MediaType: "application/octet-stream", Data: base64.StdEncoding.EncodeToString(b)}}
	}
	def := func(name string) bus.ToolDef {
		return bus.ToolDef{Name: name, Description: "Stored.", ReadOnly: true, InputSchema: []byte(`{"type":"object"}`)}
	}
	_, err := e.d.AddWorker(t.Context(), xtest.WorkerSpec{Config: worker.Config{InlineLimit: 4096}, Setup: func(w *worker.Worker) error {
		_ = w.Handle(def("blob"), out(data(blob)))
		_ = w.Handle(def("text"), out(bus.Text(string(text))))
		return w.Handle(def("huge"), out(data(huge)))
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.WaitLive(t.Context(), "blob", "text", "huge"); err != nil {
		t.Fatal(err)
	}
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// storedURL calls tool through c and returns the nats-object:// URL of
// its stored output (a resource_link at 2025-06-18 and later).
func storedURL(t *testing.T, c *mcpConn, tool string) string {
	t.Helper()
	r, err := call(t, c, tool, map[string]any{}, false)
	if err != nil || r.IsError {
		t.Fatalf("%s: %+v %v", tool, r, err)
	}
	for _, ct := range r.Content {
		if l, ok := ct.(mcp.ResourceLink); ok && strings.HasPrefix(l.URI, "nats-object://") {
			return l.URI
		}
	}
	t.Fatalf("%s: no stored output in %+v", tool, r.Content)
	return ""
}

func readResource(t *testing.T, c *mcpConn, uri string) (*mcp.ReadResourceResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	req := mcp.ReadResourceRequest{}
	req.Params.URI = uri
	return c.ReadResource(ctx, req)
}

// TestStoredOutputResource: a stored output of the session is readable
// through resources/read byte for byte (a blob as base64, UTF-8 text as
// text); one above MaxResource is refused with its size; a URI of another
// session is refused and nothing is published on P.outputs for it.
func TestStoredOutputResource(t *testing.T) {
	e := startEnv(t, false, func(c *Config) { c.MaxResource = 256 << 10 })
	blob, huge := randomBytes(1, 64<<10), randomBytes(2, 300<<10)
	text := []byte(strings.Repeat("grüße, toolbus — ", 1200))
	e.storedWorker(t, blob, text, huge)
	c := e.connect(t, "s1", mcp.ProtocolVersion20250618, "alice")

	caps, err := c.ListResourceTemplates(t.Context(), mcp.ListResourceTemplatesRequest{})
	if err != nil || len(caps.ResourceTemplates) != 1 || caps.ResourceTemplates[0].URITemplate.Raw() != outputsTemplate {
		t.Fatalf("templates: %+v %v", caps, err)
	}

	uri := storedURL(t, c, "blob")
	res, err := readResource(t, c, uri)
	if err != nil || len(res.Contents) != 1 {
		t.Fatalf("read %s: %+v %v", uri, res, err)
	}
	b, ok := res.Contents[0].(mcp.BlobResourceContents)
	got, _ := base64.StdEncoding.DecodeString(b.Blob)
	if !ok || !bytes.Equal(got, blob) || b.URI != uri || b.MIMEType != "application/octet-stream" {
		t.Fatalf("blob: %T %d bytes, %s %s", res.Contents[0], len(got), b.URI, b.MIMEType)
	}

	// A 2026-07-28 client (no MCP session) reads it too.
	modern := e.connect(t, "s1", mcp.ProtocolVersion20260728, "alice")
	if res, err := readResource(t, modern, uri); err != nil || len(res.Contents) != 1 {
		t.Fatalf("2026-07-28 read: %+v %v", res, err)
	} else if b, _ := res.Contents[0].(mcp.BlobResourceContents); b.Blob != base64.StdEncoding.EncodeToString(blob) {
		t.Fatal("2026-07-28 read other bytes")
	}

	uri = storedURL(t, c, "text")
	res, err = readResource(t, c, uri)
	if err != nil || len(res.Contents) != 1 {
		t.Fatalf("read %s: %+v %v", uri, res, err)
	}
	if tc, ok := res.Contents[0].(mcp.TextResourceContents); !ok || tc.Text != string(text) || !strings.HasPrefix(tc.MIMEType, "text/plain") {
		t.Fatalf("text: %T", res.Contents[0])
	}

	if _, err := readResource(t, c, storedURL(t, c, "huge")); err == nil || !strings.Contains(err.Error(), "307200 bytes") ||
		!strings.Contains(err.Error(), "toolbus fetch") {
		t.Fatalf("huge: %v", err)
	}

	// Session s2 may not read s1's output: refused, nothing published.
	other := e.connect(t, "s2", mcp.ProtocolVersion20250618, "alice")
	nc := e.conn(t, xtest.RoleRouter)
	sub, err := nc.SubscribeSync(e.bus.Subjects().All("outputs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := readResource(t, other, uri); err == nil || !strings.Contains(err.Error(), "another session") {
		t.Fatalf("another session's output: %v", err)
	}
	// A read of s2's own that is not stored goes out; it must be the
	// only message seen, so the refused one published nothing.
	bad := strings.Replace(uri, "/s1.", "/s2.", 1)
	_, _ = readResource(t, other, bad)
	m, err := sub.NextMsg(bound)
	if err != nil {
		t.Fatal(err)
	}
	if want := e.bus.Subjects().Outputs("s2"); m.Subject != want {
		t.Fatalf("published on %s, want only %s", m.Subject, want)
	}
	if m, err := sub.NextMsg(100 * time.Millisecond); err != nats.ErrTimeout {
		t.Fatalf("a second outputs request: %v %v", m, err)
	}
}

// TestBridgedResources: the resources of a bridged server whose tools the
// session lists are listed (mcp__<server>__<name>, the server's URIs and
// template) and read through P.resources.<server>: text, blob, a
// template's URI, and a URI read before any listing.
func TestBridgedResources(t *testing.T) {
	e := newEnv(t)
	e.bridgeServer(t, "r", resourceServer(t))
	if err := e.d.WaitLive(t.Context(), "mcp__r__echo"); err != nil {
		t.Fatal(err)
	}
	// Read before listing: the facade lists the servers for it.
	fresh := e.connect(t, "s1", mcp.ProtocolVersion20251125, "alice")
	if res, err := readResource(t, fresh, "file:///notes.txt"); err != nil || res.Contents[0].(mcp.TextResourceContents).Text != "remember" {
		t.Fatalf("read before listing: %+v %v", res, err)
	}

	c := e.connect(t, "s1", mcp.ProtocolVersion20251125, "bob")
	l, err := c.ListResources(t.Context(), mcp.ListResourcesRequest{})
	if err != nil || len(l.Resources) != 2 {
		t.Fatalf("list: %+v %v", l, err)
	}
	byURI := map[string]mcp.Resource{}
	for _, r := range l.Resources {
		byURI[r.URI] = r
	}
	if n := byURI["file:///notes.txt"]; n.Name != "mcp__r__notes" || n.Description != "The notes." || n.MIMEType != "text/plain" {
		t.Errorf("notes: %+v", n)
	}
	tl, err := c.ListResourceTemplates(t.Context(), mcp.ListResourceTemplatesRequest{})
	if err != nil || len(tl.ResourceTemplates) != 2 {
		t.Fatalf("templates: %+v %v", tl, err)
	}
	for uri, want := range map[string]string{"file:///notes.txt": "remember", "file:///logs/2026-12-01": "log of file:///logs/2026-12-01"} {
		res, err := readResource(t, c, uri)
		if err != nil || len(res.Contents) != 1 {
			t.Fatalf("read %s: %+v %v", uri, res, err)
		}
		if tc, ok := res.Contents[0].(mcp.TextResourceContents); !ok || tc.Text != want || tc.URI != uri {
			t.Errorf("read %s: %+v", uri, res.Contents[0])
		}
	}
	res, err := readResource(t, c, "file:///logo.png")
	if err != nil || len(res.Contents) != 1 {
		t.Fatalf("read logo: %+v %v", res, err)
	}
	if b, ok := res.Contents[0].(mcp.BlobResourceContents); !ok || b.Blob != base64.StdEncoding.EncodeToString([]byte("\x89PNG")) || b.MIMEType != "image/png" {
		t.Errorf("logo: %+v", res.Contents[0])
	}
	if _, err := readResource(t, c, "file:///none"); err == nil {
		t.Error("an unknown URI was read")
	}
}

// TestResourcesCapability: every revision is offered resources (2026-07-28
// through server/discover).
func TestResourcesCapability(t *testing.T) {
	e := newEnv(t)
	for _, v := range revisions {
		c := e.connect(t, "s1", v, "alice")
		if c.GetServerCapabilities().Resources == nil {
			t.Errorf("%s: no resources capability", v)
		}
	}
}

// TestStdioOldHostReadsStoredOutput: over stdio, a 2024-11-05 host gets a
// stored output's link as text naming its URL, and reads the output
// through resources/read byte for byte.
func TestStdioOldHostReadsStoredOutput(t *testing.T) {
	e := newEnv(t)
	blob := randomBytes(4, 32<<10)
	e.storedWorker(t, blob, []byte(strings.Repeat("x", 8192)), randomBytes(5, 8192))
	c := e.stdioClient(t, "stdio2", "alice")
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.ProtocolVersion20241105
	req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	if init, err := c.Initialize(t.Context(), req); err != nil || init.ProtocolVersion != mcp.ProtocolVersion20241105 || init.Capabilities.Resources == nil {
		t.Fatalf("initialize: %+v %v", init, err)
	}
	r, err := call(t, c, "blob", map[string]any{}, false)
	if err != nil || len(r.Content) != 1 {
		t.Fatalf("blob: %+v %v", r, err)
	}
	text := textOf(r)
	uri, _, _ := strings.Cut(strings.TrimPrefix(text, "[resource "), " ")
	if !strings.HasPrefix(text, "[resource nats-object://") || !strings.Contains(uri, "#sha256=") {
		t.Fatalf("the link as text: %q", text)
	}
	res, err := readResource(t, c, uri)
	if err != nil || len(res.Contents) != 1 {
		t.Fatalf("read %s: %+v %v", uri, res, err)
	}
	b, _ := res.Contents[0].(mcp.BlobResourceContents)
	if got, _ := base64.StdEncoding.DecodeString(b.Blob); !bytes.Equal(got, blob) {
		t.Fatalf("read %d bytes, not the stored %d", len(got), len(blob))
	}
}

// TestBridgedResourcesConfined: a session whose listing has no tool of a
// bridged server reads none of its resources, even a URI registered while
// it had one, and lists none.
func TestBridgedResourcesConfined(t *testing.T) {
	e := newEnv(t)
	b, err := bridge.New(e.conn(t, xtest.RoleWorker), &bridge.File{Servers: []bridge.Server{{Name: "r", Transport: bridge.TransportHTTP,
		URL: resourceServer(t), Group: "ops"}}}, bridge.Config{Heartbeat: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	if err := e.d.WaitLive(t.Context(), "mcp__r__echo"); err != nil {
		t.Fatal(err)
	}
	e.resetTools(t, "s1", map[string]bool{"ops": true})
	c := e.connect(t, "s1", mcp.ProtocolVersion20251125, "alice")
	if res, err := readResource(t, c, "file:///notes.txt"); err != nil || len(res.Contents) != 1 {
		t.Fatalf("read while listed: %+v %v", res, err)
	}
	e.resetTools(t, "s1", map[string]bool{"ops": false})
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		if slices.Contains(busNames(t, e, "s1", "alice"), "mcp__r__echo") {
			return errors.New("still listed")
		}
		return nil
	})
	if _, err := readResource(t, c, "file:///notes.txt"); err == nil {
		t.Fatal("read a resource of a server the session no longer lists")
	}
	if l, err := c.ListResources(t.Context(), mcp.ListResourcesRequest{}); err != nil || len(l.Resources) != 0 {
		t.Fatalf("list: %+v %v", l, err)
	}
}

// TestStoredReadCost measures resources/read of a 4 MiB and a 16 MiB (the
// default bound) stored output; it runs only with TOOLBUS_MEASURE=1:
//
//	TOOLBUS_MEASURE=1 go test -count=1 -run TestStoredReadCost -v ./mcp/facade
func TestStoredReadCost(t *testing.T) {
	if os.Getenv("TOOLBUS_MEASURE") != "1" {
		t.Skip("set TOOLBUS_MEASURE=1 to measure")
	}
	e := newEnv(t)
	e.storedWorker(t, randomBytes(1, DefaultMaxResource), []byte("x"), randomBytes(2, 4<<20))
	c := e.connect(t, "s1", mcp.ProtocolVersion20250618, "alice")
	for _, tool := range []string{"huge", "blob"} {
		uri := storedURL(t, c, tool)
		start := time.Now()
		res, err := readResource(t, c, uri)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := res.Contents[0].(mcp.BlobResourceContents)
		t.Logf("%d bytes (%d base64 characters) read in %v", base64.StdEncoding.DecodedLen(len(b.Blob)), len(b.Blob), time.Since(start).Round(time.Millisecond))
	}
}
