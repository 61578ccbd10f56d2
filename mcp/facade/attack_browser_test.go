package facade

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestAttackBrowserReachesInsecureFacade is a web page in the browser of
// the desktop user whose host talks to a facade started with
// --mcp-insecure on a loopback address (session 18, red team). mcp-go
// refuses a POST that is not application/json (a cross-site form or a
// no-cors fetch cannot send one without a CORS preflight) and, on a
// loopback connection, a Host that is not a loopback name (DNS
// rebinding); but the facade answered tasks, task-augmented tools/call
// and the groups verbs itself, before mcp-go, so neither check applied:
//
//   - a cross-site no-cors fetch (text/plain, Origin of the page) ran a
//     tool in any session as a task, blind;
//   - a page whose name was rebound to 127.0.0.1 (Host: its own name)
//     ran a tool as a task, listed the session's tasks and read their
//     results.
//
// Every request of that kind is now refused before the facade reads it.
func TestAttackBrowserReachesInsecureFacade(t *testing.T) {
	e := newEnv(t)
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	post := func(t *testing.T, host, contentType, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+"/mcp/s1", strings.NewReader(body))
		if host != "" {
			req.Host = host
		}
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Origin", "http://evil.example")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	rpc := func(method string, params any) string {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
		return string(b)
	}
	taskCall := rpc("tools/call", map[string]any{"name": "hello", "arguments": map[string]any{"name": "page"}, "task": map[string]any{}})
	for _, c := range []struct {
		name, host, contentType, body string
	}{
		{"cross-site task call", "", "text/plain", taskCall},
		{"cross-site groups activate", "", "text/plain", rpc(methodGroupsActivate, map[string]any{"groups": []string{"ops"}})},
		{"cross-site form", "", "application/x-www-form-urlencoded", taskCall},
		{"rebound task call", "evil.example:" + u.Port(), "application/json", taskCall},
		{"rebound tasks/list", "evil.example:" + u.Port(), "application/json", rpc("tasks/list", map[string]any{})},
		{"rebound groups list", "evil.example", "application/json", rpc(methodGroupsList, map[string]any{})},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body := post(t, c.host, c.contentType, c.body)
			if status < 400 || strings.Contains(body, `"result"`) {
				t.Fatalf("HTTP %d %s: the facade answered a browser's request", status, body)
			}
		})
	}
	// A host on the loopback name still gets its answer, and s1 has no
	// task: nothing the page sent ran.
	status, body := post(t, "", "application/json", rpc("tasks/list", map[string]any{}))
	var out struct {
		Result struct {
			Tasks []json.RawMessage `json:"tasks"`
		} `json:"result"`
	}
	if status != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
		t.Fatalf("a loopback host's tasks/list: HTTP %d %s", status, body)
	}
	if len(out.Result.Tasks) > 0 {
		t.Fatalf("the page's calls made tasks: %s", body)
	}
}
