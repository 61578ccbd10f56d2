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
// any other session ever reaches the page, so one session blinds the
// approvals of all, for as long as its calls stay parked. A fix needs the
// list in pages or inputs left out of it (a protocol change, section 9):
// a known gap.
func TestAttackInboxBlindedByOneSession(t *testing.T) {
	knownBug(t, "one session's large parked inputs blind the approver's inbox to every session (docs/security.md, known gap)")
	e := newEnv(t, 1)
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true, Permission: bus.PermissionAsk})
	srv, err := inbox.New(e.connect(t), inbox.Config{Token: "inbox-blinded-0123456789", Approver: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(t.Context()) })
	const each = 1 << 19 // under a call input's bound (1 MiB)
	input, _ := json.Marshal(map[string]string{"x": strings.Repeat("x", each)})
	for i := range int(e.nc.MaxPayload())/each + 1 {
		if r := e.callParked(t, "hostile", fmt.Sprintf("r%d", i), bus.Call{ID: "c1", Name: "ask", Input: input}); len(r.Parked) != 1 {
			t.Fatalf("batch %d: %+v", i, r)
		}
	}
	if r := e.callParked(t, "victim", "r1", bus.Call{ID: "c1", Name: "ask", Input: json.RawMessage(`{"deploy":"staging"}`)}); len(r.Parked) != 1 {
		t.Fatalf("victim: %+v", r)
	}
	want := bus.CallKey("victim", "r1", "c1")
	testkit.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		req := httptest.NewRequest(http.MethodGet, "/api/calls", nil)
		req.Header.Set(inbox.TokenHeader, "inbox-blinded-0123456789")
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		if !strings.Contains(rec.Body.String(), `"key":"`+want+`"`) {
			return fmt.Errorf("the victim's call %s is not on the approver's page (%d bytes listed)", want, rec.Body.Len())
		}
		return nil
	})
}
