package mcpinterop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/mcp/bridge"
	"github.com/toolbus/toolbus/mcp/facade"
	"github.com/toolbus/toolbus/mcp/mcptest"
)

// front is a reverse proxy without affinity in front of two facade
// processes (each on its own NATS connection): every request goes to the
// next one, as a round-robin load balancer sends it (issue 29, F2).
type front struct {
	url     string
	backend [2]http.Handler

	mu sync.Mutex
	n  int
	// calls, when set, alternates the tools/call requests among
	// themselves (counting from 0), and the others among themselves.
	calls  *int
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
	if fr.calls != nil && method == string(mcp.MethodToolsCall) {
		fr.n--
		i = *fr.calls % 2
		*fr.calls++
	}
	fr.served = append(fr.served, string("AB"[i])+" "+r.Method+" "+method)
	fr.mu.Unlock()
	fr.backend[i].ServeHTTP(w, r)
}

// crossed counts the requests of method ("": the answers to the facade's
// elicitations, POSTed responses) and those of them that reached another
// process than the tools/call before them.
func (fr *front) crossed(method string) (n, crossed int) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	last := ""
	for _, s := range fr.served {
		switch {
		case strings.HasSuffix(s, " POST tools/call"):
			last = s[:1]
		case strings.HasSuffix(s, " POST "+method):
			n++
			if s[:1] != last {
				crossed++
			}
		}
	}
	return n, crossed
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
		el := goElicitor{asked: make(chan string, n)}
		c := legacyMCPGo(t, url(s), el, transport.WithContinuousListening())
		call := func(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error) {
			req := mcp.CallToolRequest{}
			req.Params.Name, req.Params.Arguments = name, args
			ctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			return c.CallTool(ctx, req)
		}
		before, crossedBefore := fr.crossed("")
		for i := range n {
			r, err := call(t.Context(), "deploy", map[string]any{})
			if err != nil || r.IsError || mcpgoText(r) != "deployed" {
				t.Fatalf("deploy %d: %+v %v (served %v)", i, r, err, fr.served)
			}
			testkit.Recv(t, el.asked, bound, "the elicitation")
		}
		if answers, crossed := fr.crossed(""); answers-before != n || crossed == crossedBefore {
			t.Fatalf("%d answers, %d on the other process: want %d, some crossed (served %v)", answers-before, crossed-crossedBefore, n, fr.served)
		}
		// mcp-go's client cancels over HTTP by ending the request's stream
		// (v1.2.1 sends no notifications/cancelled there): the process
		// running the call sees it itself.
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
		before, crossedBefore := fr.crossed("")
		p := runNode(t, path, url(s), token, strconv.Itoa(n))
		if st := p.next(t, "connect"); st.Version != mcp.ProtocolVersion20251125 {
			t.Fatalf("connected at %q", st.Version)
		}
		for i := range n {
			if st := p.next(t, "deploy"); st.IsError || st.Text != "deployed" || st.Notices != i+1 {
				t.Fatalf("deploy %d: %+v (served %v)", i, st, fr.served)
			}
		}
		if answers, crossed := fr.crossed(""); answers-before != n || crossed == crossedBefore {
			t.Fatalf("%d answers, %d on the other process: want %d, some crossed", answers-before, crossed-crossedBefore, n)
		}
		before, crossedBefore = fr.crossed(cancelled)
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
		if cancels, crossed := fr.crossed(cancelled); cancels-before != n || crossed == crossedBefore {
			t.Fatalf("%d cancels, %d on the other process: want %d, some crossed (served %v)", cancels-before, crossed-crossedBefore, n, fr.served)
		}
	})
}

// cancelled is the method of a cancel.
const cancelled = string(mcp.MethodNotificationCancelled)

// legacyMCPGo is mcp-go's client at url with alice's token, initialised
// at 2025-11-25, its elicitations answered by el; closed when t ends.
func legacyMCPGo(t *testing.T, url string, el mcpclient.ElicitationHandler, opts ...transport.StreamableHTTPCOption) *mcpclient.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(url, append([]transport.StreamableHTTPCOption{transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}),
		transport.WithHTTPLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
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
	return c
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

// TestAlternatingQuestionsAtOnce (issue 29, F2): a 2025-11-25 host behind
// the alternating address calls a bridged tool (for x), and once its
// server's question is put to the host calls it again (for y), so the two
// calls run on the two processes and each asks the host its question
// (elicitation/create) while the other's is open; the host answers x only
// once it was asked y. mcp-go numbered both processes' requests from 1,
// and an answer reaching the other process was taken by that process's
// own question of the same id: the calls got each other's answers.
// mcp-go's client and the TypeScript SDK each get their own answers back
// in every round.
func TestAlternatingQuestionsAtOnce(t *testing.T) {
	const rounds = 6
	e := newEnv(t)
	fr := alternating(t, e)
	// Each round's two calls go to the two processes whatever the host
	// sends between them (its GET stream, late answers); the rest
	// alternates as before.
	fr.calls = new(int)
	const tool = "mcp__q__ask"
	e.bridge(t, bridge.Server{Name: "q", Transport: bridge.TransportHTTP, URL: mcptest.AskServer(t)}, bridge.Config{Heartbeat: time.Second}, tool)
	want := func(i int) []string {
		return []string{fmt.Sprintf(`accept {"name":"x%d-name"}`, i), fmt.Sprintf(`accept {"name":"y%d-name"}`, i)}
	}
	// bothProcesses checks that every round's two calls ran on both
	// processes and some answer reached the process that did not run the
	// call before it.
	bothProcesses := func(t *testing.T, before int) {
		t.Helper()
		fr.mu.Lock()
		calls := []string{}
		for _, s := range fr.served[before:] {
			if strings.HasSuffix(s, " POST tools/call") {
				calls = append(calls, s[:1])
			}
		}
		fr.mu.Unlock()
		split := len(calls) == 2*rounds
		for i := 0; split && i < len(calls); i += 2 {
			split = calls[i] != calls[i+1]
		}
		if _, crossed := fr.crossed(""); !split || crossed == 0 {
			t.Fatalf("tools/call served by %v, %d answers on the other process: want each round's calls on both and some crossed", calls, crossed)
		}
	}

	t.Run("mcp-go", func(t *testing.T) {
		h := &namer{asked: map[string]chan struct{}{}}
		c := legacyMCPGo(t, fr.url+"/mcp/altq-go", h)
		fr.mu.Lock()
		before := len(fr.served)
		fr.mu.Unlock()
		for i := range rounds {
			got := make([]string, 2)
			var wg sync.WaitGroup
			for j, who := range []string{"x", "y"} {
				who := fmt.Sprintf("%s%d", who, i)
				if j == 1 {
					testkit.Recv(t, h.ch(fmt.Sprintf("x%d", i)), bound, "the first call's question")
				}
				wg.Go(func() {
					req := mcp.CallToolRequest{}
					req.Params.Name, req.Params.Arguments = tool, map[string]any{"for": who}
					ctx, cancel := context.WithTimeout(t.Context(), bound)
					defer cancel()
					r, err := c.CallTool(ctx, req)
					if err != nil {
						got[j] = "error: " + err.Error()
						return
					}
					got[j] = mcpgoText(r)
				})
			}
			wg.Wait()
			if !slices.Equal(got, want(i)) {
				t.Fatalf("round %d: %q (served %v)", i, got, fr.served)
			}
		}
		bothProcesses(t, before)
	})

	t.Run("typescript", func(t *testing.T) {
		path := script(t, "questions.mjs")
		fr.mu.Lock()
		before := len(fr.served)
		fr.mu.Unlock()
		p := runNode(t, path, fr.url+"/mcp/altq-ts", token, tool, strconv.Itoa(rounds))
		if st := p.next(t, "connect"); st.Version != mcp.ProtocolVersion20251125 {
			t.Fatalf("connected at %q", st.Version)
		}
		for i := range rounds {
			var st struct{ Texts []string }
			if err := json.Unmarshal(p.nextRaw(t, "round"), &st); err != nil || !slices.Equal(st.Texts, want(i)) {
				t.Fatalf("round %d: %q %v (served %v)", i, st.Texts, err, fr.served)
			}
		}
		p.next(t, "done")
		bothProcesses(t, before)
	})
}

// namer is a host's user who answers "Your name, please (for <w>)." with
// the name "<w>-name"; asked "for x<i>", it answers only once it was
// asked "for y<i>" too, so both questions are open at once.
type namer struct {
	mu    sync.Mutex
	asked map[string]chan struct{} // closed once "for <w>" was asked
}

// ch is closed once the host was asked for who.
func (h *namer) ch(who string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.asked[who]
	if c == nil {
		c = make(chan struct{})
		h.asked[who] = c
	}
	return c
}

func (h *namer) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	_, who, ok := strings.Cut(req.Params.Message, "(for ")
	who, _, _ = strings.Cut(who, ")")
	if !ok || who == "" {
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionDecline}}, nil
	}
	c := h.ch(who)
	h.mu.Lock()
	select {
	case <-c:
	default:
		close(c)
	}
	h.mu.Unlock()
	if rest, first := strings.CutPrefix(who, "x"); first {
		select {
		case <-h.ch("y" + rest):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"name": who + "-name"}}}, nil
}
