package inbox_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/inbox"
)

// TestAttackTokenInHistory (session 39, red team): the link `toolbus inbox`
// printed carried the token (?token=), and a browser keeps every URL it
// visits in its history, whatever the page does next (history.replaceState
// only takes it out of the address bar): an extension that reads the
// history, its sync, or whoever later reads the profile opened the inbox
// with it. The link now carries a one-time code that the page exchanges
// (POST /api/login) for the token; the code is then void, so the URL in the
// history opens nothing, as a page or as a credential. Held beside it: a
// reload keeps the tab's token; another tab gets in with the token typed
// in the page, never in the address.
func TestAttackTokenInHistory(t *testing.T) {
	e := newEnv(t)
	visited := e.in.URL // what the history keeps
	tab := e.blank(t)
	e.run(t, tab, chromedp.Navigate(visited), chromedp.WaitVisible(css(`#status.live`)))
	if at := get(t, tab, chromedp.Location()); strings.Contains(at, "?") {
		t.Fatalf("the address bar still shows %s", at)
	}
	e.run(t, tab, chromedp.Reload(), chromedp.WaitVisible(css(`#status.live`)))

	// The attacker opens the URL from the history in a tab of its own.
	thief := e.blank(t)
	e.run(t, thief, chromedp.Navigate(visited), chromedp.WaitVisible(css(`#login`)))
	if st := get(t, thief, chromedp.Text(css(`#status`))); st != "no token" {
		t.Fatalf("the visited URL opened the inbox again: status %q", st)
	}
	// Or takes what it carries as the token, or exchanges it again.
	u, err := url.Parse(visited)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range u.Query() {
		for _, set := range []func(*http.Request){
			func(r *http.Request) { r.Header.Set(inbox.TokenHeader, v[0]) },
			func(r *http.Request) {
				r.Method = http.MethodPost
				r.URL.Path = "/api/login"
				r.Header.Set(inbox.CodeHeader, v[0])
			},
		} {
			if code, body := e.request(t, "/api/calls", set); code != http.StatusUnauthorized {
				t.Errorf("the URL's %.8s… as a credential: %d %.200s", v[0], code, body)
			}
		}
	}
	// Held: another tab gets in with the token typed in the page.
	e.run(t, thief, chromedp.SendKeys(css(`#token`), e.in.Token()), chromedp.Click(css(`#login button`)),
		chromedp.WaitVisible(css(`#status.live`)))
	if at := get(t, thief, chromedp.Location()); strings.Contains(at, e.in.Token()) {
		t.Fatalf("the token went to the address: %s", at)
	}
}

// TestLoginCodeOnce: of many requests exchanging one code at once, exactly
// one gets the token; the code is void after.
func TestLoginCodeOnce(t *testing.T) {
	e := newEnv(t)
	link := e.in.Link()
	code := link[strings.Index(link, "=")+1:]
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[int]int{}
	for range 8 {
		wg.Go(func() {
			c, _ := e.request(t, "/api/login", func(r *http.Request) {
				r.Method = http.MethodPost
				r.Header.Set(inbox.CodeHeader, code)
			})
			mu.Lock()
			got[c]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if got[http.StatusOK] != 1 || got[http.StatusUnauthorized] != 7 {
		t.Fatalf("one code exchanged by 8 at once: %v", got)
	}
}

// blank opens a new tab on no page.
func (e *env) blank(t *testing.T) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(e.bctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		t.Fatal(err)
	}
	return tab
}

// request sends a GET of path to the inbox, changed by set, as
// application/json, and returns the status and body.
func (e *env) request(t *testing.T, path string, set func(*http.Request)) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+e.in.Addr+path, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	set(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	return resp.StatusCode, b.String()
}

// TestHostPortHeld (session 39, red team: held) attacks the inbox's Host
// rule, which compares no port, in Chromium: a page of the attacker's name
// rebound to 127.0.0.1 (host-resolver-rules stand in for the DNS), on the
// inbox's port or on another port forwarded to it, is refused (403): the
// browser sends the name of the URL, so no port makes it a loopback name.
// And the port is not compared because a forwarded port is how a remote
// approver reaches a loopback inbox (ssh -L 9000:127.0.0.1:8080): the
// browser sends localhost:9000, and the page works there.
func TestHostPortHeld(t *testing.T) {
	e := newEnv(t, chromedp.Flag("host-resolver-rules", "MAP rebound.test 127.0.0.1"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go forward(ln, e.in.Addr)
	_, inboxPort, _ := net.SplitHostPort(e.in.Addr)
	_, fwdPort, _ := net.SplitHostPort(ln.Addr().String())

	tab := e.blank(t)
	link := strings.Replace(e.in.Link(), e.in.Addr, "localhost:"+fwdPort, 1)
	e.run(t, tab, chromedp.Navigate(link), chromedp.WaitVisible(css(`#status.live`)))

	for _, port := range []string{inboxPort, fwdPort} {
		evil := e.blank(t)
		resp, err := chromedp.Run(evil, chromedp.NavigateResponse("http://rebound.test:"+port+"/"))
		if err != nil {
			t.Fatalf("rebound.test:%s: %v", port, err)
		}
		if resp.Status != http.StatusForbidden {
			t.Fatalf("a rebound page on port %s: %d, want 403", port, resp.Status)
		}
	}
}

// forward copies each connection ln accepts to and from addr, as ssh -L.
func forward(ln net.Listener, addr string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer u.Close()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			_, _ = io.Copy(c, u)
		}()
	}
}
