package bridge

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttackServerListsManyTools (session 34, red team): a bridged MCP
// server (third-party code, the least trusted role) lists 2,000 tools.
// The bridge registered every one: each went into the deployment's
// catalogue and into every session's tool listing (no group: basic), so
// one server's listing could crowd every agent's tools past what a model
// API takes (OpenAI: 128 tools a request). Now a server's first MaxTools
// tools are bridged and the rest left out, logged.
func TestAttackServerListsManyTools(t *testing.T) {
	e := newEnv(t)
	s := server.NewMCPServer("many", "1.0.0", server.WithToolCapabilities(true))
	for i := range 2000 {
		s.AddTool(mcp.NewTool(fmt.Sprintf("t%04d", i), mcp.WithDescription("One of many.")),
			func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("ok"), nil
			})
	}
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s))
	t.Cleanup(hs.Close)
	b := e.bridge(&File{Servers: []Server{{Name: "m", Transport: TransportHTTP, URL: hs.URL + "/mcp"}}})
	testkit.CheckFor(t, 2*time.Minute, 20*time.Millisecond, func() error {
		if b.Tools("m") == nil {
			return errNotYet
		}
		return nil
	})
	if n := len(b.Tools("m")); n != MaxTools {
		t.Fatalf("%d of the server's 2,000 tools bridged, want %d", n, MaxTools)
	}
	_, names, err := e.defs()
	if err != nil {
		t.Fatal(err)
	}
	listed := 0
	for _, n := range names {
		if strings.HasPrefix(n, "mcp__m__") {
			listed++
		}
	}
	if listed > MaxTools {
		t.Fatalf("s1 lists %d of the server's tools", listed)
	}
}

// TestAttackServerChurnsTools (session 34, red team): a bridged server
// changes a tool's description and says its list changed, again and again
// (here for 2 s, as fast as it can). Each notice had the bridge list the
// tools again and, the definitions differing, stop its worker and start a
// new one: up to MaxTools definitions and beats written to the catalogue
// and P_workers per notice of a hundred bytes, every router's catalogue
// changed, every session's listing with it. Now the bridge lists a
// server's tools at most once a second (refreshEvery); notices in between
// are one.
func TestAttackServerChurnsTools(t *testing.T) {
	e := newEnv(t)
	s := server.NewMCPServer("churn", "1.0.0", server.WithToolCapabilities(true))
	tool := func(i int) {
		s.AddTool(mcp.NewTool("x", mcp.WithDescription(fmt.Sprintf("Version %d.", i))),
			func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("ok"), nil
			})
	}
	tool(0)
	var lists atomic.Int64
	hs := httptest.NewServer(countLists(server.NewStreamableHTTPServer(s), &lists))
	t.Cleanup(hs.Close)
	e.bridge(&File{Servers: []Server{{Name: "c", Transport: TransportHTTP, URL: hs.URL + "/mcp"}}})
	e.waitTools([]string{"mcp__c__x"}, nil)
	from, start, last := lists.Load(), time.Now(), 0
	for last = 1; time.Since(start) < 2*time.Second; last++ {
		tool(last) // mcp-go sends notifications/tools/list_changed to the bridge
		runtime.Gosched()
	}
	tool(last)
	took := time.Since(start)
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error { // the last version is bridged
		d, _, err := e.defs()
		if err == nil && d["mcp__c__x"].Description != fmt.Sprintf("Version %d.", last) {
			err = errNotYet
		}
		return err
	})
	n := lists.Load() - from
	t.Logf("%d tools/list in %v of churn (%d versions)", n, took, last)
	if most := int64(took/refreshEvery) + 3; n > most {
		t.Fatalf("%d tools/list in %v of churn, want at most %d", n, took, most)
	}
}

// countLists counts the tools/list requests h serves.
func countLists(h http.Handler, n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, []byte(`"tools/list"`)) {
				n.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r)
	})
}
