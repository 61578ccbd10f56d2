package embedded

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/inbox"
	"github.com/toolbus/toolbus/internal/testkit"
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
	// Enough that the first page leaves out more inputs than a poll reads
	// on its own: later polls must fill them in.
	hostile := int(e.nc.MaxPayload())/each + 10
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
	if err := srv.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(t.Context()) })
	want := bus.CallKey("victim", "r1", "c1")
	// A poll pages through 8 MiB of inputs (the test server's max payload)
	// and reads 4 left-out inputs: seconds a poll under -race on a busy
	// machine (20 of 26 filled in within 20 s in CI), so the bound is wide.
	testkit.CheckFor(t, 2*time.Minute, 100*time.Millisecond, func() error {
		req := httptest.NewRequest(http.MethodGet, "/api/calls", nil)
		req.Header.Set(inbox.TokenHeader, "inbox-blinded-0123456789")
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		var page struct {
			Calls []inbox.Item `json:"calls"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
			return fmt.Errorf("the page's calls: %v (%d bytes)", err, rec.Body.Len())
		}
		victim, whole := false, 0
		for _, it := range page.Calls {
			victim = victim || it.Key == want
			if it.Session == "hostile" && len(it.Input) > each && it.Note == "" {
				whole++
			}
		}
		if !victim || whole != hostile {
			return fmt.Errorf("the page lists the victim's call %s: %v, and %d of the hostile session's %d calls whole", want, victim, whole, hostile)
		}
		return nil
	})
}
