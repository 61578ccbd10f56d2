package facade

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// TestStampNotification: at 2026-07-28 a notifications/cancelled that has
// the version header but no _meta version is accepted (202) by mcp-go's
// transport once stamped, where unstamped it got the 400 that made the
// Go SDK drop its session; a request without it is still refused, and
// earlier revisions are left alone.
func TestStampNotification(t *testing.T) {
	srv := server.NewStreamableHTTPServer(server.NewMCPServer("t", "1"))
	stamped := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := readPost(w, r); ok {
			srv.ServeHTTP(w, r)
		}
	}))
	defer stamped.Close()
	bare := httptest.NewServer(srv)
	defer bare.Close()
	post := func(url, version, body string) int {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if version != "" {
			req.Header.Set(mcp.HeaderProtocolVersion, version)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	cancel := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user"}}`
	if code := post(bare.URL, mcp.ProtocolVersion20260728, cancel); code != http.StatusBadRequest {
		t.Logf("mcp-go now accepts it unstamped (HTTP %d): the stamp may go", code)
	}
	if code := post(stamped.URL, mcp.ProtocolVersion20260728, cancel); code != http.StatusAccepted {
		t.Fatalf("stamped notifications/cancelled: HTTP %d, want 202", code)
	}
	noParams := `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	if code := post(stamped.URL, mcp.ProtocolVersion20260728, noParams); code != http.StatusAccepted {
		t.Fatalf("stamped notification without params: HTTP %d, want 202", code)
	}
	request := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	if code := post(stamped.URL, mcp.ProtocolVersion20260728, request); code != http.StatusBadRequest {
		t.Fatalf("a 2026-07-28 request without _meta: HTTP %d, want 400", code)
	}
	big := `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + strings.Repeat("x", maxBody) + `"}}`
	if code := post(stamped.URL, mcp.ProtocolVersion20260728, big); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over maxBody: HTTP %d, want 413", code)
	}
}
