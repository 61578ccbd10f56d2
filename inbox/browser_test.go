package inbox_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/inbox"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

var screenshots = flag.Bool("screenshots", false, "write the page's screenshots to docs/inbox-*.png")

// browserPath is the Chromium to drive, or "" when none is installed.
func browserPath() string {
	if p := os.Getenv("TOOLBUS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// env is a deployment with a confirm-asking tool (deploy), an external
// tool (ticket), an inbox and a headless browser.
type env struct {
	x      *xtest.Deployment
	cl     *client.Client
	in     *inbox.Running
	runs   *atomic.Int32
	events *client.Events
	tab    context.Context // the first page
	bctx   context.Context // the browser
}

type deployIn struct {
	Env   string `json:"env"`
	Notes string `json:"notes,omitempty"`
}

func newEnv(t *testing.T, flags ...chromedp.ExecAllocatorOption) *env {
	t.Helper()
	path := browserPath()
	if path == "" {
		t.Skip("no chromium binary found (apt-get install chromium); the browser tests need one")
	}
	x := xtest.Run(t, xtest.Config{Routers: 1})
	nc, err := x.Connect(t.Context(), xtest.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{x: x, cl: client.New(nc, client.Config{Source: "test/agent"}), runs: new(atomic.Int32)}
	if _, err := x.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "deploy", Description: "Deploy the app."},
			func(_ context.Context, _ *worker.Call, in deployIn) (string, error) {
				e.runs.Add(1)
				return "deployed to " + in.Env, nil
			})
	}}); err != nil {
		t.Fatal(err)
	}
	e.registerExternal(t, "ticket")
	if err := x.WaitLive(t.Context(), "deploy", "ticket"); err != nil {
		t.Fatal(err)
	}
	if e.events, err = e.cl.Watch(t.Context(), "*"); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, e.events.Stop)
	inc, err := x.Connect(t.Context(), "inbox")
	if err != nil {
		t.Fatal(err)
	}
	if e.in, err = inbox.Open(t.Context(), inc, "127.0.0.1:0", "", "", inbox.Config{Source: "test/inbox"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.in.Close(context.Background()) })

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1180, 760))
	opts = append(opts, flags...)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	bctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(cancelB)
	if err := chromedp.Do(bctx); err != nil { // starts the browser, without a timeout (it would end it)
		t.Fatal(err)
	}
	e.bctx = bctx
	e.tab = e.page(t)
	return e
}

// page opens a new tab on the inbox with a one-time link of its own.
func (e *env) page(t *testing.T) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(e.bctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil { // opens the tab for as long as tab lives
		t.Fatal(err)
	}
	e.run(t, tab, chromedp.Navigate(e.in.Link()), chromedp.WaitVisible(css(`#status.live`)))
	return tab
}

// run runs steps on tab, bounded.
func (e *env) run(t *testing.T, tab context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// get runs one action returning a value on tab, bounded.
func get[T any](t *testing.T, tab context.Context, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// registerExternal registers an external tool that allows itself, as a
// handler's registrar would.
func (e *env) registerExternal(t *testing.T, name string) {
	t.Helper()
	def := bus.ToolDef{Name: name, Description: "A person files a ticket.", External: true, Permission: bus.PermissionAllow,
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"}}}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"ticket":{"type":"integer"}},"required":["ticket"]}`)}
	ev, err := bus.NewEvent(bus.TypeRegister, "test/registrar", bus.Register{Worker: "registrar", Tools: []bus.ToolDef{def}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := ev.Msg(e.x.Subjects().Workers.Register(def.Name))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := e.cl.Conn().RequestMsgWithContext(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := bus.Decode(resp); err != nil || got.Type != bus.TypeRegisterAck {
		t.Fatalf("register: %v %v", got, err)
	}
}

// park calls tool in session (call id c1) and checks it parked as kind;
// it returns the call's key.
func (e *env) park(t *testing.T, session, replyID, tool string, input any, kind string) string {
	t.Helper()
	reply, err := e.cl.Call(t.Context(), session, bus.Batch{User: json.RawMessage(`"alice"`), Calls: []bus.Call{{ID: "c1", Name: tool, Input: client.Input(input)}}},
		client.WithReplyID(replyID))
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Parked) != 1 || reply.Parked[0].Kind != kind {
		t.Fatalf("reply: %+v", reply)
	}
	return bus.CallKey(session, replyID, "c1")
}

// waitDone returns the results of reply id's batch.done.
func (e *env) waitDone(t *testing.T, replyID string) []bus.Result {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-e.events.C:
			var d bus.BatchDone
			if ev.Type == bus.TypeBatchDone && ev.ReplyID == replyID && ev.DataAs(&d) == nil {
				return d.Results
			}
		case <-timeout:
			t.Fatalf("no batch.done for reply %s", replyID)
		}
	}
}

func card(key string) string { return fmt.Sprintf(`article[data-key=%q]`, key) }

// css is the element sel selects.
func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

func (e *env) shot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	if !*screenshots {
		return
	}
	png := get(t, tab, chromedp.CaptureScreenshot())
	if err := os.WriteFile("../docs/inbox-"+name+".png", png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// evalAwait evaluates js, awaiting a promise.
func evalAwait[T any](js string) chromedp.Action[T] {
	return chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise)
}

// eval evaluates js for its effect.
func eval(js string) chromedp.Action[chromedp.Void] { return chromedp.Evaluate[chromedp.Void](js) }

// TestInboxBrowser drives the inbox in headless Chromium: parked calls
// appear live, allow & remember, deny with a reason, an external answer in
// JSON, two pages on one call, a changed digest, and no token.
func TestInboxBrowser(t *testing.T) {
	e := newEnv(t)
	in := deployIn{Env: "prod", Notes: strings.Repeat("release notes line\n", 3)}

	start := time.Now()
	k1 := e.park(t, "s1", "r1", "deploy", in, bus.KindConfirm)
	e.run(t, e.tab, chromedp.WaitVisible(css(card(k1))))
	t.Logf("a parked call appeared on the page %v after it parked", time.Since(start))
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the call took %v to appear (want about a second)", d)
	}
	k2 := e.park(t, "s2", "r2", "ticket", map[string]string{"title": "rotate the TLS certificate"}, bus.KindExternal)
	big := deployIn{Env: "staging", Notes: strings.Repeat("a long changelog entry that folds\n", 120)}
	k3 := e.park(t, "s3", "r3", "deploy", big, bus.KindConfirm)
	e.run(t, e.tab, chromedp.WaitVisible(css(card(k2))), chromedp.WaitVisible(css(card(k3))))
	e.shot(t, e.tab, "waiting")

	t.Run("allow and remember", func(t *testing.T) {
		e.run(t, e.tab, chromedp.Click(css(card(k1)+" .head")), chromedp.WaitVisible(css(card(k1)+" button.remember")))
		e.shot(t, e.tab, "expanded")
		e.run(t, e.tab, chromedp.Click(css(card(k1)+" button.remember")))
		res := e.waitDone(t, "r1")
		if len(res) != 1 || res[0].State != bus.StateSuccess || res[0].Output[0].Text != "deployed to prod" || e.runs.Load() != 1 {
			t.Fatalf("results %+v, %d runs", res, e.runs.Load())
		}
		e.run(t, e.tab, chromedp.WaitNotPresent(css(card(k1))))
		reply, err := e.cl.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "c2", Name: "deploy", Input: client.Input(in)}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(reply.Parked) != 0 || len(reply.Results) != 1 || reply.Results[0].State != bus.StateSuccess || e.runs.Load() != 2 {
			t.Fatalf("the remembered call: %+v", reply)
		}
	})

	t.Run("deny with a reason", func(t *testing.T) {
		e.run(t, e.tab, chromedp.Click(css(card(k3)+" .head")),
			chromedp.WaitVisible(css(card(k3)+" details.fold > summary")), // a large input is folded
			chromedp.SendKeys(css(card(k3)+" input.reason"), "not on a Friday"),
			chromedp.Click(css(card(k3)+" button.deny")))
		res := e.waitDone(t, "r3")
		want := `<system-reminder>The execution of tool "deploy" is denied by user!</system-reminder>` + "\nReason: not on a Friday"
		if len(res) != 1 || res[0].State != bus.StateDenied || res[0].Output[0].Text != want {
			t.Fatalf("results %+v", res)
		}
	})

	t.Run("external answered with JSON", func(t *testing.T) {
		// The tool declares an output_schema: a text, or JSON it does not accept, is refused.
		for act, want := range map[string]string{
			`{action: "answer", output: "done"}`:                                "ticket declares an output_schema: answer with JSON",
			`{action: "answer", format: "json", output: "{\"ticket\": \"x\"}"}`: "the output does not match ticket's output_schema: /ticket",
		} {
			out := get(t, e.tab, evalAwait[inbox.Outcome](fmt.Sprintf(`window.toolbusInbox.send(window.toolbusInbox.calls.get(%q), %s)`, k2, act)))
			if out.OK || !strings.Contains(out.Message, want) {
				t.Fatalf("%s: %+v", act, out)
			}
		}
		e.run(t, e.tab, chromedp.Click(css(card(k2)+" .head")),
			chromedp.SetValue(css(card(k2)+" textarea.output"), `{"ticket": 42, "queue": "ops"}`),
			chromedp.SetValue(css(card(k2)+" select.format"), "json"),
			chromedp.Click(css(card(k2)+" button.answer")))
		res := e.waitDone(t, "r2")
		if len(res) != 1 || res[0].State != bus.StateSuccess || res[0].Output[0].Text != `{"queue":"ops","ticket":42}` {
			t.Fatalf("results %+v", res)
		}
	})

	t.Run("two pages, one call", func(t *testing.T) {
		k := e.park(t, "s4", "r4", "deploy", deployIn{Env: "prod"}, bus.KindConfirm)
		other := e.page(t)
		e.run(t, e.tab, chromedp.WaitVisible(css(card(k))))
		// The second page holds the call as it showed it, then the first answers.
		e.run(t, other, chromedp.WaitVisible(css(card(k))),
			eval(fmt.Sprintf(`window.stale = Object.assign({}, window.toolbusInbox.calls.get(%q)); true`, k)))
		e.run(t, e.tab, chromedp.Click(css(card(k)+" .head")), chromedp.Click(css(card(k)+" button.allow")))
		if res := e.waitDone(t, "r4"); len(res) != 1 || res[0].State != bus.StateSuccess {
			t.Fatalf("results %+v", res)
		}
		out := get(t, other, evalAwait[inbox.Outcome](`window.toolbusInbox.send(window.stale, {action: "allow"})`))
		shown := get(t, other, chromedp.Text(css("#flash")))
		if out.OK || !strings.Contains(shown, "Refused: call s4.r4.c1 no longer waits: it was answered") {
			t.Fatalf("the second answer: %+v; the page shows %q", out, shown)
		}
		// Sent to the router all the same, it says who won.
		err := e.cl.Parked().Confirm(t.Context(), "deploy", "s4", "r4", "c1", bus.Answer{Confirmed: new(bool)})
		if !strings.Contains(fmt.Sprint(err), "already answered") {
			t.Fatalf("the router on a second answer: %v", err)
		}
	})

	t.Run("input changed after the page loaded", func(t *testing.T) {
		k := e.park(t, "s5", "r5", "deploy", deployIn{Env: "prod"}, bus.KindConfirm)
		e.run(t, e.tab, chromedp.WaitVisible(css(card(k))),
			// The page showed another input than the one parked now.
			eval(fmt.Sprintf(`window.toolbusInbox.calls.get(%q).input_digest = "sha256:"+"0".repeat(64); true`, k)),
			chromedp.Click(css(card(k)+" .head")), chromedp.Click(css(card(k)+" button.allow")),
			chromedp.WaitVisible(css(card(k)+" .refusal")))
		shown := get(t, e.tab, chromedp.Text(css(card(k)+" .refusal")))
		if !strings.Contains(shown, "the router refused: input changed: call c1's parked input has input_digest sha256:") {
			t.Fatalf("the page shows %q", shown)
		}
		e.shot(t, e.tab, "refused")
		// A stale revision is refused by the inbox before the router.
		out := get(t, e.tab, evalAwait[inbox.Outcome](fmt.Sprintf(`window.toolbusInbox.send(Object.assign({}, window.toolbusInbox.calls.get(%q), {revision: 1}), {action: "allow"})`, k)))
		if out.OK || out.Code != "changed" || !strings.Contains(out.Message, "changed since the page showed it") {
			t.Fatalf("stale revision: %+v", out)
		}
		if e.runs.Load() != 3 { // s1 twice, s4 once
			t.Fatalf("%d runs: a refused confirmation ran", e.runs.Load())
		}
	})

	t.Run("filters and keys", func(t *testing.T) {
		k6 := e.park(t, "s6", "r6", "deploy", deployIn{Env: "qa"}, bus.KindConfirm)
		k7 := e.park(t, "s7", "r7", "deploy", deployIn{Env: "qa"}, bus.KindConfirm)
		e.run(t, e.tab, chromedp.WaitVisible(css(card(k6))), chromedp.WaitVisible(css(card(k7))),
			chromedp.SendKeys(css("#f-session"), "s7"), chromedp.WaitNotVisible(css(card(k6))),
			chromedp.Blur(css("#f-session")), chromedp.KeyEvent("j"), chromedp.WaitVisible(css(card(k7)+".selected")),
			chromedp.KeyEvent("a"))
		if res := e.waitDone(t, "r7"); len(res) != 1 || res[0].State != bus.StateSuccess {
			t.Fatalf("results %+v", res)
		}
		e.run(t, e.tab, chromedp.WaitNotPresent(css(card(k7))),
			eval(`document.querySelector("#f-session").value = ""; document.querySelector("#filters").dispatchEvent(new Event("input"))`), chromedp.WaitVisible(css(card(k6))))
	})

	t.Run("no token", func(t *testing.T) {
		base := "http://" + e.in.Addr
		for _, path := range []string{"/api/events", "/api/calls", "/api/login"} {
			resp, err := http.Post(base+path, "application/json", nil)
			if path != "/api/login" {
				resp, err = http.Get(base + path)
			}
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s without the token: %d", path, resp.StatusCode)
			}
		}
		// The page and its assets hold no token (session 38: the page keeps the URL's in sessionStorage).
		for _, path := range []string{"/", "/assets/app.js"} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || strings.Contains(string(b), e.in.Token()) {
				t.Errorf("GET %s without the token: %d, holds the token %v", path, resp.StatusCode, strings.Contains(string(b), e.in.Token()))
			}
		}
		// A POST without the header (a cross-site form) is refused.
		req, _ := http.NewRequest(http.MethodPost, base+"/api/act", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST without the header: %d", resp.StatusCode)
		}
		// In the browser, a fresh profile without the token is asked for it.
		tab, cancel := chromedp.NewContext(e.bctx, chromedp.WithNewBrowserContext())
		defer cancel()
		if err := chromedp.Do(tab); err != nil {
			t.Fatal(err)
		}
		e.run(t, tab, chromedp.Navigate(base+"/"), chromedp.WaitVisible(css("#flash.error")), chromedp.WaitVisible(css("#login")))
		body := get(t, tab, chromedp.Text(css("body")))
		if !strings.Contains(body, "give the inbox's token") {
			t.Fatalf("page without the token: %q", body)
		}
	})
}
