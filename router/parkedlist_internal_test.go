package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/inbox"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestApproverNotGoneFromLaggingRouter: the approver's inbox reads a call
// through a router's parked.list; a router whose cache of parked calls is
// behind the store (its watch cut here, so it stays behind however long
// the test takes) must not answer a list without a call that waits. Router
// a parks the call and stops; router b, then the only one, never saw it.
// A list of every session from b is refused rather than answered without
// the call, b lists the session from the stream's leader, and the inbox
// answers the call (before the fix: `gone`).
func TestApproverNotGoneFromLaggingRouter(t *testing.T) {
	c := testkit.RunCluster(t)
	start := func(node int, id string) (*Router, *nats.Conn) {
		nc := testkit.ConnectURL(t, c.URL(node))
		r, err := New(nc, Config{ID: id, Store: store.Config{Replicas: 3}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		testkit.Stop(t, r.Stop)
		return r, nc
	}
	ra, agentNC := start(0, "ra")
	rb, _ := start(1, "rb")

	// An external tool that asks first: the call parks as a confirmation.
	reg, err := bus.NewEvent(bus.TypeRegister, "test/registrar", bus.Register{Worker: "registrar", Tools: []bus.ToolDef{{
		Name: "deploy", Description: "Deploys.", External: true, ConcurrencySafe: true, Permission: bus.PermissionAsk,
		InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := reg.Msg("toolbus.register")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agentNC.RequestMsg(m, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, r := range []*Router{ra, rb} {
			if _, ok := r.reg.Lookup("deploy"); !ok {
				return fmt.Errorf("router %s does not know deploy yet", r.ID())
			}
		}
		return nil
	})

	// b's cache of parked calls stops here: a call that a parks, b has not
	// seen (one that b parks, it has: the batch goes to either router, so
	// the agent calls until a parked one).
	if err := rb.parked.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	agent := client.New(agentNC, client.Config{Source: "test/agent"})
	var key, session string
	for i := 0; key == "" && i < 30; i++ {
		session = fmt.Sprintf("s%d", i)
		reply, err := agent.Call(t.Context(), session, bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "deploy", Input: json.RawMessage(`{}`)}}},
			client.WithReplyID("r1"))
		if err != nil {
			t.Fatal(err)
		}
		if len(reply.Parked) != 1 {
			t.Fatalf("reply %+v, want c1 parked", reply)
		}
		if len(rb.parked.Read.Parked(session, "")) == 0 {
			key = bus.CallKey(session, "r1", "c1")
		}
	}
	if key == "" {
		t.Fatal("router b parked every call")
	}
	rec, err := ra.parked.Read.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if err := ra.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}

	// The approver's inbox: it answers c1.
	inboxNC := testkit.ConnectURL(t, c.URL(1))
	const token = "approver-lagging-router-0123"
	srv, err := inbox.New(inboxNC, inbox.Config{Token: token, Approver: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, srv.Stop)
	body, _ := json.Marshal(inbox.Act{Key: key, Revision: rec.Rev, InputDigest: rec.InputDigest, Action: "allow"})
	req := httptest.NewRequest(http.MethodPost, "/api/act", strings.NewReader(string(body)))
	req.Header.Set(inbox.TokenHeader, token)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	srv.Handler().ServeHTTP(w, req)
	var out inbox.Outcome
	_ = json.Unmarshal(w.Body.Bytes(), &out)
	if w.Code != http.StatusOK || !out.OK {
		t.Fatalf("the approver's answer to a call that waits: %d %s %s", w.Code, out.Code, out.Message)
	}

	// A list of every session from b: refused, not answered without c1.
	admin := client.New(inboxNC, client.Config{Source: "test/operator"})
	var all struct {
		Parked []bus.ParkedCall `json:"parked"`
	}
	err = admin.Admin(t.Context(), "parked.list", "", nil, &all)
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeInternal || !strings.Contains(be.Message, "behind") {
		t.Fatalf("parked.list of every session from a router behind: %v, list %+v; want internal (behind)", err, all)
	}
	// One session's list from b: read from the leader, c1 in it, now
	// waiting for the external tool's answer.
	var one struct {
		Parked []bus.ParkedCall `json:"parked"`
	}
	if err := admin.Admin(t.Context(), "parked.list", session, nil, &one); err != nil {
		t.Fatal(err)
	}
	if len(one.Parked) != 1 || bus.CallKey(session, one.Parked[0].ReplyID, one.Parked[0].ID) != key || one.Parked[0].Revision <= rec.Rev || one.Parked[0].Kind != bus.KindExternal {
		t.Fatalf("parked.list of %s from a router behind: %+v, want %s, external, after revision %d", session, one.Parked, key, rec.Rev)
	}
}
