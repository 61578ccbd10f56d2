package inbox_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/inbox"
)

// TestLoginCrossOriginHeld (session 39, red team c: held) attacks the
// login from a page of another origin in Chromium, with the code itself
// (the worst case: a code leaked): a fetch with the code's header needs a
// preflight, which the inbox never grants (no Access-Control-Allow-*), so
// the POST is never sent, the code is not spent, and nothing is read; the
// requests a page can send without a preflight (a form's text/plain, a
// no-cors fetch) carry no header, so no code, and are refused. The code
// still opens the page after: the attack took nothing from the approver.
func TestLoginCrossOriginHeld(t *testing.T) {
	e := newEnv(t)
	link := e.in.Link()
	code := link[strings.Index(link, "=")+1:]
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, `<!doctype html><title>evil</title><p id="evil">hello</p>`)
	}))
	defer evil.Close()
	tab := e.blank(t)
	e.run(t, tab, chromedp.Navigate(evil.URL+"/"), chromedp.WaitVisible(css("#evil")))
	api := fmt.Sprintf(`"http://%s/api/login"`, e.in.Addr)
	for name, js := range map[string]string{
		"a fetch with the code": `fetch(` + api + `, {method: "POST", headers: {"X-Toolbus-Code": "` + code + `", "Content-Type": "application/json"}, body: "{}"})
			.then(r => r.text()).catch(e => "refused: " + e)`,
		"a no-cors fetch": `fetch(` + api + `, {method: "POST", mode: "no-cors", body: "{\"code\": \"` + code + `\"}"})
			.then(r => "opaque " + r.type).catch(e => "refused: " + e)`,
	} {
		got := get(t, tab, evalAwait[string](js))
		if strings.Contains(got, e.in.Token()) || !strings.HasPrefix(got, "refused") && got != "opaque opaque" {
			t.Errorf("%s from another origin: %.200s", name, got)
		}
	}
	c, body := e.request(t, "/api/login", func(r *http.Request) {
		r.Method = http.MethodPost
		r.Header.Set(inbox.CodeHeader, code)
	})
	if c != http.StatusOK || !strings.Contains(body, e.in.Token()) {
		t.Fatalf("the approver's code after the attack: %d %.100s", c, body)
	}
}
