package inbox_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/inbox"
)

// TestAttack38bTokenModel (session 38, second red team: held) attacks the
// inbox's token in a header from the browser of an approver whose inbox
// tab holds it:
//   - a parked call whose input is markup that would run script (and load
//     an image, whose request would carry a Referer) is shown as text;
//   - a page of another origin (another port of 127.0.0.1) that knows the
//     token and a valid answer's body (the worst case) sends it to
//     /api/act with the header: the header needs a CORS preflight, which
//     the inbox refuses (401, no Access-Control-Allow-*), so the browser
//     sends nothing; without the header (a simple request, or no-cors,
//     which drops it) the inbox refuses it (401, unread by the page: no
//     Access-Control-Allow-Origin). The call stays parked.
func TestAttack38bTokenModel(t *testing.T) {
	e := newEnv(t)
	token := e.in.Token()
	xss := `<img src="/x?from=img" onerror="window.__xss=1"><script>window.__xss=1</script>`
	key := e.park(t, "s1", "r1", "deploy", deployIn{Env: "prod", Notes: xss}, bus.KindConfirm)
	e.run(t, e.tab, chromedp.WaitVisible(css(card(key))), chromedp.Click(css(card(key)+" .head")),
		chromedp.WaitVisible(css(card(key)+" button.remember")))
	ran := get(t, e.tab, chromedp.Evaluate[bool](`window.__xss === 1`))
	imgs := get(t, e.tab, chromedp.Evaluate[int](`document.querySelectorAll("img").length`))
	if ran || imgs != 0 {
		t.Fatalf("the call's input ran as markup: script %v, %d images", ran, imgs)
	}

	api := func(path string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+e.in.Addr+path, nil)
		req.Header.Set(inbox.TokenHeader, token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	_, b := api("/api/calls")
	var list struct{ Calls []inbox.Item }
	if err := json.Unmarshal(b, &list); err != nil || len(list.Calls) != 1 {
		t.Fatalf("calls: %v %s", err, b)
	}
	it := list.Calls[0]
	body, _ := json.Marshal(map[string]any{"key": it.Key, "revision": it.Revision, "input_digest": it.InputDigest, "action": "allow"})
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><title>evil</title><p id="done" hidden></p><script>
const inbox = %q, token = %q, body = %q, out = [];
const tries = [
  {method: "POST", headers: {"Content-Type": "application/json", "X-Toolbus-Token": token}, body},
  {method: "POST", headers: {"Content-Type": "text/plain"}, body},
  {method: "POST", mode: "no-cors", headers: {"X-Toolbus-Token": token}, body},
];
(async () => {
  for (const opts of tries) {
    try { const r = await fetch(inbox + "/api/act", opts); out.push(r.type + " " + r.status); }
    catch (e) { out.push("blocked"); }
  }
  document.getElementById("done").textContent = out.join(",");
  document.getElementById("done").hidden = false;
})();
</script>`, "http://"+e.in.Addr, token, body)
	}))
	defer evil.Close()
	tab := e.page(t)
	e.run(t, tab, chromedp.Navigate(evil.URL+"/"), chromedp.WaitVisible(css("#done")))
	got := get(t, tab, chromedp.Text(css("#done")))
	// The CORS answer to the header: a preflight refused, and nothing allowed.
	req, _ := http.NewRequest(http.MethodOptions, "http://"+e.in.Addr+"/api/act", nil)
	req.Header.Set("Origin", evil.URL)
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "content-type,x-toolbus-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for name := range resp.Header {
		if strings.HasPrefix(name, "Access-Control-") {
			t.Errorf("the preflight is answered %s: %v", name, resp.Header[name])
		}
	}
	_, b = api("/api/calls")
	if got != "blocked,blocked,opaque 0" || resp.StatusCode < 400 || !strings.Contains(string(b), it.Key) || e.runs.Load() != 0 {
		t.Fatalf("another origin's requests: %q; preflight %d; the call %s parked: %v, %d runs", got, resp.StatusCode, it.Key, strings.Contains(string(b), it.Key), e.runs.Load())
	}
}
