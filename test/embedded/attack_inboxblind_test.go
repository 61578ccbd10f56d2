package embedded

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/inbox"
)

// TestAttackInboxBlindedByOneSession (session 28, second red team): an
// agent of one session parks calls that ask for a confirmation whose
// inputs together pass the server's max payload (each batch under it).
// The approver's inbox (the router's own under --secure) lists waiting
// calls through parked.list of every session, whose reply is then
// limit_exceeded (TestAttackReplyPastMaxPayload) every second: no call of
// any other session reached the page. Since 1.18 parked.list answers in
// pages under the max payload, an input that does not fit left out
// (input_omitted) and read on its own: every call reaches the page, the
// hostile session's with their inputs too.
func TestAttackInboxBlindedByOneSession(t *testing.T) {
	e := newEnv(t, 1)
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true, Permission: bus.PermissionAsk})
	const each = 1 << 19 // under a call input's bound (1 MiB)
	input, _ := json.Marshal(map[string]string{"x": strings.Repeat("x", each)})
	// Enough that a list of them all passes the max payload, and more than
	// a poll reads on its own: later polls must fill them in.
	hostile := int(e.nc.MaxPayload())/each + 1
	for i := range hostile {
		if r := e.callParked(t, "hostile", fmt.Sprintf("r%d", i), bus.Call{ID: "c1", Name: "ask", Input: input}); len(r.Parked) != 1 {
			t.Fatalf("batch %d: %+v", i, r)
		}
	}
	if r := e.callParked(t, "victim", "r1", bus.Call{ID: "c1", Name: "ask", Input: json.RawMessage(`{"deploy":"staging"}`)}); len(r.Parked) != 1 {
		t.Fatalf("victim: %+v", r)
	}
	srv, err := inbox.New(e.connect(t), inbox.Config{Token: "inbox-blinded-0123456789", Approver: true})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if err := srv.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(t.Context()) })
	want := bus.CallKey("victim", "r1", "c1")
	// The page's event stream sends the list at every change. The first
	// poll lists every call without its input, each input is then read on
	// its own (16 a poll) and never again: at most a few polls fill them
	// all, seconds each under -race on a busy machine (session 40: 35-46 s
	// at load 13 with two CPU burners), and the victim's call is listed at
	// once, as is one parked after (the polls go on).
	web := httptest.NewServer(srv.Handler())
	t.Cleanup(web.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, web.URL+"/api/events", nil)
	req.Header.Set(inbox.TokenHeader, "inbox-blinded-0123456789")
	resp, err := web.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events, state, filled := bufio.NewReader(resp.Body), "no list", time.Time{}
	for {
		line, err := events.ReadBytes('\n')
		if err != nil {
			t.Fatalf("after %v: %v; the last list: %s", time.Since(started), err, state)
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		var page struct {
			Calls []inbox.Item `json:"calls"`
		}
		if err := json.Unmarshal(data, &page); err != nil {
			t.Fatalf("the page's calls: %v (%d bytes)", err, len(data))
		}
		victim, later, whole := false, false, 0
		for _, it := range page.Calls {
			victim = victim || it.Key == want
			later = later || it.Key == bus.CallKey("victim", "r2", "c1") && it.Note == "" && len(it.Input) > 0
			if it.Session == "hostile" && len(it.Input) > each && it.Note == "" {
				whole++
			}
		}
		if !victim && len(page.Calls) > 0 {
			t.Fatalf("a list without the victim's call %s: %d calls", want, len(page.Calls))
		}
		switch state = fmt.Sprintf("%d of the hostile session's %d calls whole, a later call listed: %v", whole, hostile, later); {
		case later:
			t.Logf("a call parked once they were in, listed whole %v later", time.Since(filled))
			return
		case whole == hostile && filled.IsZero():
			// The poll goes on: a call parked now reaches the page too.
			filled = time.Now()
			t.Logf("every input filled in %v from the inbox's start", filled.Sub(started))
			if r := e.callParked(t, "victim", "r2", bus.Call{ID: "c1", Name: "ask", Input: json.RawMessage(`{"deploy":"prod"}`)}); len(r.Parked) != 1 {
				t.Fatalf("victim's later call: %+v", r)
			}
		}
	}
}
