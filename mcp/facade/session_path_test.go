package facade

import (
	"net/http/httptest"
	"testing"
)

// TestSessionOf: every URL shape the MCP clients use names the session,
// and nothing else does.
func TestSessionOf(t *testing.T) {
	for _, tc := range []struct {
		url, header, want string
		ok                bool
	}{
		{"/mcp/s1", "", "s1", true},
		{"/mcp/s1/", "", "s1", true},
		{"/mcp/s1/mcp", "", "s1", true}, // a client that appends /mcp
		{"/mcp", "s2", "s2", true},      // the Inspector rewrites paths to /mcp
		{"/mcp/", "s2", "s2", true},
		{"/mcp?session=s3", "", "s3", true},
		{"/mcp?session=s3", "s2", "s2", true}, // the header wins
		{"/mcp", "", "", false},
		{"/mcp?session=a.b", "", "a.b", false},
		{"/mcp/a.b", "", "a.b", false},
		{"/mcp/s1/other", "", "s1/other", false},
		{"/other/s1", "", "", false},
		{"/", "s1", "", false},
	} {
		r := httptest.NewRequest("POST", tc.url, nil)
		if tc.header != "" {
			r.Header.Set(SessionHeader, tc.header)
		}
		id, ok := sessionOf(r)
		if ok != tc.ok || (ok && id != tc.want) {
			t.Errorf("%s (header %q): %q %v, want %q %v", tc.url, tc.header, id, ok, tc.want, tc.ok)
		}
	}
}
