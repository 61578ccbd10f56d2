package embedded

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/inbox"
)

// TestInboxAnswersRightAfterPark: a person answers a call the moment its
// record is written, through an inbox whose connection is on another node
// than the router's and the agent's, and whose watch or poll has not
// listed the call yet: the inbox reads the record afresh from the
// bucket's leader (as the operator: store.KV; as the approver: a router's
// parked.list), so no answer is refused as gone or changed. On the
// cluster (TestOnCluster) a direct get, which any replica answers, could
// come from a follower that has not applied the record yet.
func TestInboxAnswersRightAfterPark(t *testing.T) {
	e := newEnv(t, 2)
	// External tools (no worker whose beats a loaded machine could
	// delay): ext waits for its answer, ask first for a confirmation.
	e.registerDefs(t, bus.ToolDef{Name: "ext", External: true}, bus.ToolDef{Name: "ask", External: true, Permission: bus.PermissionAsk})
	const token = "inbox-right-after-park-0123"
	start := func(approver bool) http.Handler {
		srv, err := inbox.New(e.connect(t), inbox.Config{Token: token, Approver: approver})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Stop(t.Context()) })
		return srv.Handler()
	}
	operator, approver := start(false), start(true)
	act := func(h http.Handler, a inbox.Act) (int, inbox.Outcome) {
		b, _ := json.Marshal(a)
		req := httptest.NewRequest(http.MethodPost, "/api/act", strings.NewReader(string(b)))
		req.Header.Set(inbox.TokenHeader, token)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var out inbox.Outcome
		_ = json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	const rounds = 40
	var refused []string
	for i := range rounds {
		for _, c := range []struct {
			tool string
			h    http.Handler
			a    inbox.Act
		}{
			{"ext", operator, inbox.Act{Action: "answer", Output: "picked"}},
			{"ask", approver, inbox.Act{Action: "allow"}},
		} {
			reply := fmt.Sprintf("r-%s-%d", c.tool, i)
			r := e.callParked(t, "s1", reply, bus.Call{ID: "c1", Name: c.tool, Input: json.RawMessage(`{}`)})
			if len(r.Parked) != 1 {
				t.Fatalf("%s: reply %+v, want it parked", reply, r)
			}
			// The page's revision: the record as the leader holds it.
			rec := parkedRecord(t, e, "s1", reply, "c1")
			c.a.Key, c.a.Revision, c.a.InputDigest = bus.CallKey("s1", reply, "c1"), rec.Rev, rec.InputDigest
			if code, out := act(c.h, c.a); code != http.StatusOK {
				refused = append(refused, fmt.Sprintf("%s %s: %d %s %s", c.tool, reply, code, out.Code, out.Message))
			}
		}
	}
	if len(refused) > 0 {
		t.Fatalf("%d of %d answers right after park refused:\n%s", len(refused), 2*rounds, strings.Join(refused, "\n"))
	}
}
