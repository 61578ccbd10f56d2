package facade

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// TestModernCancel: only a 2026-07-28 notifications/cancelled over HTTP
// is answered by the facade itself; everything else goes on to mcp-go
// with the body readPost read.
func TestModernCancel(t *testing.T) {
	const cancel = `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`
	for _, tc := range []struct {
		name, method, version, body string
		want                        bool
	}{
		{"2026-07-28 cancel", http.MethodPost, mcp.ProtocolVersion20260728, cancel, true},
		{"2025-11-25 cancel", http.MethodPost, mcp.ProtocolVersion20251125, cancel, false},
		{"no version header", http.MethodPost, "", cancel, false},
		{"another notification", http.MethodPost, mcp.ProtocolVersion20260728, `{"jsonrpc":"2.0","method":"notifications/progress","params":{}}`, false},
		{"a request named so", http.MethodPost, mcp.ProtocolVersion20260728, `{"jsonrpc":"2.0","id":1,"method":"notifications/cancelled"}`, false},
		{"a batch", http.MethodPost, mcp.ProtocolVersion20260728, "[" + cancel + "]", false},
		{"garbage", http.MethodPost, mcp.ProtocolVersion20260728, `{"method":`, false},
		{"GET", http.MethodGet, mcp.ProtocolVersion20260728, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/mcp/s1", strings.NewReader(tc.body))
			if tc.version != "" {
				r.Header.Set(mcp.HeaderProtocolVersion, tc.version)
			}
			body, m, ok := readPost(httptest.NewRecorder(), r)
			if got := ok && modernCancel(r, m); got != tc.want {
				t.Fatalf("modernCancel = %v, want %v", got, tc.want)
			}
			// The next handler reads what readPost read (a 2026-07-28
			// notification stamped: TestStampNotification).
			if after, _ := io.ReadAll(r.Body); string(after) != string(body) || tc.method == http.MethodPost && len(body) < len(tc.body) {
				t.Fatalf("body after: %q, read %q", after, body)
			}
		})
	}
}
