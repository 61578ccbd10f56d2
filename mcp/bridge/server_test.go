package bridge

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/testkit"
)

// longTool is an MCP tool name that makes a bus name of more than 64
// characters.
const longTool = "a_tool_with_a_name_that_is_much_too_long_for_the_bus_to_keep_whole"

// recorder notes what the test servers saw: cancelled calls.
type recorder struct {
	mu        sync.Mutex
	cancelled []string
	started   chan string
}

func newRecorder() *recorder { return &recorder{started: make(chan string, 16)} }

func (r *recorder) cancel(id string) {
	r.mu.Lock()
	r.cancelled = append(r.cancelled, id)
	r.mu.Unlock()
	// For a stdio server the test reads the file.
	if f := os.Getenv("BRIDGE_TEST_CANCEL_FILE"); f != "" {
		fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			fmt.Fprintln(fh, id)
			_ = fh.Close()
		}
	}
}

func (r *recorder) wasCancelled(id string) bool {
	if f := os.Getenv("BRIDGE_TEST_CANCEL_FILE"); f != "" {
		b, _ := os.ReadFile(f)
		return strings.Contains(string(b), id+"\n")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.cancelled {
		if c == id {
			return true
		}
	}
	return false
}

// testServer is an MCP server with one tool per mapping the bridge has to get right.
func testServer(rec *recorder) *server.MCPServer {
	hooks := &server.Hooks{}
	hooks.AddBeforeAny(func(_ context.Context, _ any, method mcp.MCPMethod, _ any) {
		if method == mcp.MethodTasksCancel {
			rec.cancel("tasks/cancel")
		}
	})
	s := server.NewMCPServer("bridge-test", "1.0.0", server.WithToolCapabilities(true), server.WithElicitation(), server.WithRoots(),
		server.WithTaskCapabilities(true, true, true), server.WithHooks(hooks))
	s.EnableSampling()
	addAskTools(s)
	addResources(s)
	s.AddTool(mcp.NewTool("echo", mcp.WithDescription("Echo the text."),
		mcp.WithString("text", mcp.Required()),
		mcp.WithReadOnlyHintAnnotation(true), mcp.WithIdempotentHintAnnotation(true)),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(req.GetString("text", "")), nil
		})
	s.AddTool(mcp.NewTool("read.file", mcp.WithDescription("A name with a dot."), mcp.WithTitleAnnotation("Read a file"),
		mcp.WithReadOnlyHintAnnotation(false), mcp.WithDestructiveHintAnnotation(false), mcp.WithOpenWorldHintAnnotation(true)),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("file"), nil
		})
	s.AddTool(mcp.NewTool(longTool, mcp.WithDescription("A long name."), mcp.WithIdempotentHintAnnotation(true)),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("long"), nil
		})
	s.AddTool(mcp.NewTool("media", mcp.WithDescription("Every kind of content.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			png := base64.StdEncoding.EncodeToString([]byte("png"))
			wav := base64.StdEncoding.EncodeToString([]byte("wav"))
			prio := 0.25
			text := mcp.NewTextContent("hello")
			text.Annotations = &mcp.Annotations{Audience: []mcp.Role{mcp.RoleUser}, Priority: &prio, LastModified: "2026-01-02T03:04:05Z"}
			link := mcp.NewResourceLink("https://example.com/c.pdf", "c", "The C report.", "application/pdf")
			link.Annotations = &mcp.Annotations{Audience: []mcp.Role{mcp.RoleAssistant}}
			return &mcp.CallToolResult{Content: []mcp.Content{
				text,
				mcp.NewImageContent(png, "image/png"),
				mcp.NewAudioContent(wav, "audio/wav"),
				mcp.NewEmbeddedResource(mcp.TextResourceContents{URI: "file:///a.txt", MIMEType: "text/plain", Text: "resource text"}),
				mcp.NewEmbeddedResource(mcp.BlobResourceContents{URI: "file:///b.bin", MIMEType: "application/pdf", Blob: png}),
				link,
			}}, nil
		})
	s.AddTool(mcp.NewTool("weather", mcp.WithDescription("Structured output."),
		mcp.WithRawOutputSchema([]byte(`{"type":"object","properties":{"temp":{"type":"number"}}}`))),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultStructured(map[string]any{"temp": 4}, "4 degrees"), nil
		})
	s.AddTool(mcp.NewTool("same", mcp.WithDescription("Structured output whose text is the same JSON.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultStructured(map[string]any{"a": 1}, `{"a":1}`), nil
		})
	s.AddTool(mcp.NewTool("fail", mcp.WithDescription("Always an error.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultError("it broke"), nil
		})
	s.AddTool(mcp.NewTool("slow", mcp.WithDescription("Progress, then waits until cancelled or ms pass."),
		mcp.WithString("id", mcp.Required()), mcp.WithNumber("ms")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			id := req.GetString("id", "")
			if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
				for i := 1; i <= 2; i++ {
					_ = server.ServerFromContext(ctx).SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress),
						map[string]any{"progressToken": req.Params.Meta.ProgressToken, "progress": i, "total": 2, "message": "step"})
				}
			}
			select {
			case rec.started <- id:
			default:
			}
			t := time.NewTimer(time.Duration(req.GetFloat("ms", 60000)) * time.Millisecond)
			defer t.Stop()
			select {
			case <-ctx.Done():
				rec.cancel(id)
				return nil, ctx.Err()
			case <-t.C:
				return mcp.NewToolResultText("done " + id), nil
			}
		})
	s.AddTool(mcp.NewTool("research", mcp.WithDescription("Runs only as a task; waits ms."), mcp.WithTaskSupport(mcp.TaskSupportRequired),
		mcp.WithString("id", mcp.Required()), mcp.WithNumber("ms")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			id := req.GetString("id", "")
			if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
				_ = server.ServerFromContext(ctx).SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress),
					map[string]any{"progressToken": req.Params.Meta.ProgressToken, "progress": 1, "message": "researching"})
			}
			select {
			case rec.started <- id:
			default:
			}
			// mcp-go ends a task's context with the tools/call that made
			// it; the test sees tasks/cancel through a hook instead.
			time.Sleep(time.Duration(req.GetFloat("ms", 50)) * time.Millisecond)
			return mcp.NewToolResultStructured(map[string]any{"id": id}, "researched "+id), nil
		})
	s.AddTool(mcp.NewTool("grow", mcp.WithDescription("Adds the tool named name.")),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			name := req.GetString("name", "grown")
			s.AddTool(mcp.NewTool(name, mcp.WithDescription("Added at run time.")),
				func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return mcp.NewToolResultText(name), nil
				})
			return mcp.NewToolResultText("added " + name), nil
		})
	return s
}

// httpServer serves an MCP server over streamable HTTP (or SSE) on a
// loopback port, and can be killed and restarted on the same address.
type httpServer struct {
	t    *testing.T
	sse  bool
	rec  *recorder
	addr string
	mu   sync.Mutex
	hs   *httptest.Server
}

func startHTTP(t *testing.T, sse bool, rec *recorder) *httpServer {
	h := &httpServer{t: t, sse: sse, rec: rec, addr: "127.0.0.1:0"}
	h.start()
	t.Cleanup(h.kill)
	return h
}

func (h *httpServer) start() {
	h.t.Helper()
	var ln net.Listener
	// The address may still be in use for a moment after a kill.
	testkit.CheckFor(h.t, 2*time.Second, 20*time.Millisecond, func() (err error) {
		ln, err = net.Listen("tcp", h.addr)
		return err
	})
	h.addr = ln.Addr().String()
	s := testServer(h.rec)
	var handler http.Handler
	if h.sse {
		handler = server.NewSSEServer(s, server.WithBaseURL("http://"+h.addr))
	} else {
		handler = server.NewStreamableHTTPServer(s)
	}
	hs := httptest.NewUnstartedServer(handler)
	_ = hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	h.mu.Lock()
	h.hs = hs
	h.mu.Unlock()
}

func (h *httpServer) kill() {
	h.mu.Lock()
	hs := h.hs
	h.hs = nil
	h.mu.Unlock()
	if hs != nil {
		hs.CloseClientConnections()
		hs.Close()
	}
}

func (h *httpServer) url() string {
	if h.sse {
		return "http://" + h.addr + "/sse"
	}
	return "http://" + h.addr + "/mcp"
}

var errNotYet = errors.New("not yet")

func (h *httpServer) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-h.rec.started:
	case <-time.After(bound):
		t.Fatal("the call never reached the server")
	}
}

// addAskTools adds the tools that ask the client: ask (a form
// elicitation), askurl (a URL elicitation), roots and sample.
func addAskTools(s *server.MCPServer) {
	s.AddTool(mcp.NewTool("ask", mcp.WithDescription("Asks the user for a name.")),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r, err := s.RequestElicitation(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{
				Message: "Allow the deployment? Your name, please.",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string", "minLength": 2}},
					"required": []string{"name"}}}})
			if err != nil {
				return mcp.NewToolResultError("elicitation failed: " + err.Error()), nil
			}
			c, _ := json.Marshal(r.Content)
			return mcp.NewToolResultText(string(r.Action) + " " + string(c)), nil
		})
	// askmany reports each refusal as progress ("refused (n)"), so that a
	// test can wait until every question reached the bridge before it
	// answers the waiting ones.
	s.AddTool(mcp.NewTool("askmany", mcp.WithDescription("Asks ten questions at once.")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var wg sync.WaitGroup
			var mu sync.Mutex
			refused := 0
			for range 10 {
				wg.Go(func() {
					_, err := s.RequestElicitation(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{Message: "?",
						RequestedSchema: map[string]any{"type": "object"}}})
					if err != nil && strings.Contains(err.Error(), "questions waiting") {
						mu.Lock()
						refused++
						n := refused
						mu.Unlock()
						if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
							_ = server.ServerFromContext(ctx).SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress),
								map[string]any{"progressToken": req.Params.Meta.ProgressToken, "progress": n, "message": "refused"})
						}
					}
				})
			}
			wg.Wait()
			return mcp.NewToolResultText(fmt.Sprintf("refused %d", refused)), nil
		})
	s.AddTool(mcp.NewTool("getenv", mcp.WithDescription("Reads an environment variable."), mcp.WithString("name", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			v, ok := os.LookupEnv(req.GetString("name", ""))
			return mcp.NewToolResultText(fmt.Sprintf("%v %s", ok, v)), nil
		})
	s.AddTool(mcp.NewTool("askurl", mcp.WithDescription("Sends the user to a URL.")),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r, err := s.RequestURLElicitation(ctx, server.ClientSessionFromContext(ctx), "e-1", "https://example.com/auth", "Sign in")
			if err != nil {
				return mcp.NewToolResultError("elicitation failed: " + err.Error()), nil
			}
			return mcp.NewToolResultText(string(r.Action)), nil
		})
	s.AddTool(mcp.NewTool("roots", mcp.WithDescription("Lists the client's roots.")),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r, err := s.RequestRoots(ctx, mcp.ListRootsRequest{})
			if err != nil {
				return mcp.NewToolResultError("roots failed: " + err.Error()), nil
			}
			var uris []string
			for _, root := range r.Roots {
				uris = append(uris, root.URI)
			}
			return mcp.NewToolResultText(strings.Join(uris, ",")), nil
		})
	s.AddTool(mcp.NewTool("sample", mcp.WithDescription("Asks the client's model.")),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r, err := s.RequestSampling(ctx, mcp.CreateMessageRequest{CreateMessageParams: mcp.CreateMessageParams{
				Messages: []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent("2+2?")}}, MaxTokens: 10}})
			if err != nil {
				return mcp.NewToolResultError("sampling failed: " + err.Error()), nil
			}
			tc, _ := r.Content.(mcp.TextContent)
			return mcp.NewToolResultText(r.Model + ": " + tc.Text), nil
		})
}

// addResources adds a text resource, a blob resource and a template.
func addResources(s *server.MCPServer) {
	s.AddResource(mcp.NewResource("file:///notes.txt", "notes", mcp.WithResourceDescription("The notes."), mcp.WithMIMEType("text/plain"),
		mcp.WithAnnotations([]mcp.Role{mcp.RoleUser}, 0.5, "")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: "file:///notes.txt", MIMEType: "text/plain", Text: "remember"}}, nil
		})
	s.AddResource(mcp.NewResource("file:///logo.png", "logo", mcp.WithMIMEType("image/png")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.BlobResourceContents{URI: "file:///logo.png", MIMEType: "image/png", Blob: base64.StdEncoding.EncodeToString([]byte("png"))}}, nil
		})
	s.AddResourceTemplate(mcp.NewResourceTemplate("file:///logs/{day}", "logs", mcp.WithTemplateDescription("A day's log.")),
		func(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, Text: "log of " + req.Params.URI}}, nil
		})
}
