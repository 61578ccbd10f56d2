package inbox_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestAttackTokenToAnotherPort (session 38, red team): cookies are not
// isolated by port (RFC 6265 §8.5), so an inbox token kept in a cookie for
// 127.0.0.1:<inbox port> went with every request the approver's browser
// made to any other server on 127.0.0.1 — one a session agent started in
// its workdir (the built-in shell does not restrict the network) and asked
// the person to open. That server then read the page, and the token in it,
// and confirmed the agent's own parked calls. The page now keeps the token
// in its tab's sessionStorage, which is per origin (port included), and
// sends it as a header: the other server receives nothing of it.
func TestAttackTokenToAnotherPort(t *testing.T) {
	e := newEnv(t)
	token := e.in.Token()
	got := make(chan http.Header, 4)
	dev := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Clone():
		default:
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, `<!doctype html><title>my app</title><p id="app">the agent's app</p>`)
	}))
	defer dev.Close()
	if !strings.HasPrefix(dev.URL, "http://127.0.0.1:") {
		t.Fatalf("the other server is on %s", dev.URL)
	}
	// The approver, logged in on the inbox's tab, opens the agent's page.
	tab := e.page(t)
	e.run(t, tab, chromedp.Navigate(dev.URL+"/"), chromedp.WaitVisible(css("#app")))
	h := <-got
	var leaked []string
	for name, vs := range h {
		for _, v := range vs {
			if strings.Contains(v, token) {
				leaked = append(leaked, name)
			}
		}
	}
	if len(leaked) > 0 {
		t.Errorf("the server on another port received the inbox token in %v", leaked)
	}
	// Back on the inbox, the tab still holds its token (no ?token= needed).
	e.run(t, tab, chromedp.Navigate("http://"+e.in.Addr+"/"), chromedp.WaitVisible(css(`#status.live`)))
	// What it received, replayed to the inbox, reads no call and no token.
	for _, path := range []string{"/", "/api/calls"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+e.in.Addr+path, nil)
		for name, vs := range h {
			if name == "Cookie" || name == "Authorization" || strings.HasPrefix(name, "X-") {
				req.Header[name] = vs
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), token) || path == "/api/calls" && resp.StatusCode == http.StatusOK {
			t.Errorf("GET %s with the other server's headers: %d %.200s", path, resp.StatusCode, b)
		}
	}
}
