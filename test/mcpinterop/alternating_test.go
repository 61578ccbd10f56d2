package mcpinterop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/mcp/facade"
)

// front is a reverse proxy without affinity in front of two facade
// processes (each on its own NATS connection): every request goes to the
// next one, as a round-robin load balancer sends it (issue 29, F2).
type front struct {
	url     string
	backend [2]http.Handler

	mu     sync.Mutex
	n      int
	served []string // "A POST tools/call", "B POST " (a response), in order
}

// alternating starts a second facade process with e's Config and the
// front over both; it returns the front's base address.
func alternating(t *testing.T, e *env) *front {
	t.Helper()
	second := facade.New(client.New(e.conn(t, "facade"), client.Config{Source: "toolbus/mcp"}), e.cfg)
	fr := &front{backend: [2]http.Handler{e.f.Handler(), second.Handler()}}
	hs := httptest.NewServer(http.HandlerFunc(fr.serve))
	t.Cleanup(func() { hs.Close(); second.Drain(testkit.StopContext(t)) })
	fr.url = hs.URL
	return fr
}

func (fr *front) serve(w http.ResponseWriter, r *http.Request) {
	var method string
	if r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var m struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(body, &m)
		method = m.Method
	}
	fr.mu.Lock()
	i := fr.n % 2
	fr.n++
	fr.served = append(fr.served, string("AB"[i])+" "+r.Method+" "+method)
	fr.mu.Unlock()
	fr.backend[i].ServeHTTP(w, r)
}

// crossed counts the answers to the facade's elicitations (POSTed
// responses) that reached another process than the tools/call before
// them.
func (fr *front) crossed() (answers, crossed int) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	last := ""
	for _, s := range fr.served {
		switch {
		case strings.HasSuffix(s, " POST tools/call"):
			last = s[:1]
		case strings.HasSuffix(s, " POST "):
			answers++
			if s[:1] != last {
				crossed++
			}
		}
	}
	return answers, crossed
}

// TestAlternatingFront (issue 29, F2): 2025-11-25 hosts behind one
// address that alternates every request between two facade processes —
// mcp-go's client and the TypeScript SDK — confirm deploys through
// elicitation (answers reaching the process that did not ask are carried
// to the one that did) and cancel calls (a notifications/cancelled
// reaching the other process interrupts the bus call), with no failure.
func TestAlternatingFront(t *testing.T) {
	const n = 4
	e := newEnv(t)
	fr := alternating(t, e)
	url := func(s string) string { return fr.url + "/mcp/" + s }

	t.Run("mcp-go", func(t *testing.T) {
		s := "alt-go"
		e.askMode(t, s)
		tr, err := transport.NewStreamableHTTP(url(s), transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}),
			transport.WithContinuousListening(), transport.WithHTTPLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		el := goElicitor{asked: make(chan string, n)}
		c := mcpclient.NewClient(tr, mcpclient.WithElicitationHandler(el), mcpclient.WithLegacyProtocolOnly())
		if err := c.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		init := mcp.InitializeRequest{}
		init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
		init.Params.ClientInfo = mcp.Implementation{Name: "toolbus-interop-mcp-go", Version: "1"}
		if _, err := c.Initialize(t.Context(), init); err != nil {
			t.Fatal(err)
		}
		call := func(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error) {
			req := mcp.CallToolRequest{}
			req.Params.Name, req.Params.Arguments = name, args
			ctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			return c.CallTool(ctx, req)
		}
		before, crossedBefore := fr.crossed()
		for i := range n {
			r, err := call(t.Context(), "deploy", map[string]any{})
			if err != nil || r.IsError || mcpgoText(r) != "deployed" {
				t.Fatalf("deploy %d: %+v %v (served %v)", i, r, err, fr.served)
			}
			testkit.Recv(t, el.asked, bound, "the elicitation")
		}
		if answers, crossed := fr.crossed(); answers-before != n || crossed == crossedBefore {
			t.Fatalf("%d answers, %d on the other process: want %d, some crossed (served %v)", answers-before, crossed-crossedBefore, n, fr.served)
		}
		for i := range n {
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				_, err := call(ctx, "wait", map[string]any{})
				done <- err
			}()
			testkit.Recv(t, e.started, bound, "the wait call at the worker")
			cancel()
			if err := testkit.Recv(t, done, bound, "the cancelled tools/call"); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancel %d: %v", i, err)
			}
			if why := testkit.Recv(t, e.ended, bound, "the bus call's cancellation at the worker"); why != context.Canceled.Error() {
				t.Fatalf("cancel %d: the worker's call ended with %q", i, why)
			}
			if r, err := call(t.Context(), "hello", map[string]any{"name": "again"}); err != nil || mcpgoText(r) != "hello again" {
				t.Fatalf("hello after cancel %d: %+v %v", i, r, err)
			}
		}
	})

	t.Run("typescript", func(t *testing.T) {
		path := script(t, "alternating.mjs")
		s := "alt-ts"
		e.askMode(t, s)
		before, crossedBefore := fr.crossed()
		p := runNode(t, path, url(s), token, strconv.Itoa(n))
		if st := p.next(t, "connect"); st.Version != mcp.ProtocolVersion20251125 {
			t.Fatalf("connected at %q", st.Version)
		}
		for i := range n {
			if st := p.next(t, "deploy"); st.IsError || st.Text != "deployed" || st.Notices != i+1 {
				t.Fatalf("deploy %d: %+v (served %v)", i, st, fr.served)
			}
		}
		if answers, crossed := fr.crossed(); answers-before != n || crossed == crossedBefore {
			t.Fatalf("%d answers, %d on the other process: want %d, some crossed", answers-before, crossed-crossedBefore, n)
		}
		for i := range n {
			p.next(t, "waiting")
			testkit.Recv(t, e.started, bound, "the wait call at the worker")
			p.say(t, "abort")
			if st := p.next(t, "cancel"); !st.Aborted {
				t.Fatalf("abort %d: %+v", i, st)
			}
			if why := testkit.Recv(t, e.ended, bound, "the bus call's cancellation at the worker"); why != context.Canceled.Error() {
				t.Fatalf("abort %d: the worker's call ended with %q", i, why)
			}
			if st := p.next(t, "again"); st.Text != "hello again" {
				t.Fatalf("hello after abort %d: %+v", i, st)
			}
		}
		p.next(t, "done")
	})
}

func mcpgoText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
