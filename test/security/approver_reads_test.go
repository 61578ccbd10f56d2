package security

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/inbox"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestApproverReadsThroughRouter (protocol 1.14): the approver reads the
// parked calls, with each record's revision, only through a router's
// parked.list, which lists call records and never a batch's continuation
// (its other calls' results). NATS refuses it every JetStream API request
// on the parked bucket — the direct get of a call record it had up to
// 1.13, a direct get by sequence or of the continuation's key, the
// leader's message get (whose body may name any subject or sequence),
// the stream's info, a consumer — and any write to a record. The inbox
// under the approver's login lists the call and allows it, with no
// violation.
func TestApproverReadsThroughRouter(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	ctx := testCtx(t)
	ac := d.conn("session-s1").client()
	in := client.Input(map[string]string{"who": "staging"})
	reply, err := ac.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "deploy", Input: in}, {ID: "c2", Name: "greet", Input: in}}},
		client.WithReplyID("r1"))
	must(t, err)
	if len(reply.Parked) != 2 || reply.Parked[0].Kind != bus.KindConfirm || reply.Parked[1].Kind != bus.KindQueued {
		t.Fatalf("reply %+v, want c1 parked and c2 queued", reply)
	}
	// The continuation exists (c2 waits to run after c1): the operator
	// reads it.
	const stream, subj = "KV_toolbus_parked", "$KV.toolbus_parked."
	if _, err := store.MsgGet(shortCtx(t), d.conn("operator").nc, "$JS.API.STREAM.MSG.GET."+stream,
		store.MsgGetRequest{LastBySubject: subj + "s1.r1"}); err != nil {
		t.Fatalf("the batch's continuation: %v", err)
	}

	ap := d.conn("approver")
	var listed struct {
		Parked []bus.ParkedCall `json:"parked"`
	}
	must(t, ap.client().Admin(ctx, "parked.list", "s1", nil, &listed))
	if len(listed.Parked) != 1 || listed.Parked[0].Revision == 0 || string(listed.Parked[0].User) != `"alice"` {
		t.Fatalf("parked.list %+v, want c1 with its revision and user", listed.Parked)
	}
	for _, req := range []struct{ subject, body string }{
		{"$JS.API.DIRECT.GET." + stream + "." + subj + "s1.r1.c1", ``},
		{"$JS.API.DIRECT.GET." + stream + "." + subj + "s1.r1", ``},
		{"$JS.API.DIRECT.GET." + stream, `{"seq":1}`},
		{"$JS.API.STREAM.MSG.GET." + stream, `{"last_by_subj":"` + subj + `s1.r1"}`},
		{"$JS.API.STREAM.MSG.GET." + stream, `{"seq":1}`},
		{"$JS.API.STREAM.INFO." + stream, `{"subjects_filter":">"}`},
		{"$JS.API.CONSUMER.CREATE." + stream, `{}`},
		{subj + "s1.r1.c1", `{"status":"done"}`},
	} {
		must(t, ap.nc.PublishRequest(req.subject, "_INBOX.approver.x", []byte(req.body)))
		ap.waitViolation("Publish", req.subject)
	}

	// The inbox as the approver: a login of its own, which NATS refuses
	// nothing.
	il := d.conn("approver")
	const token = "approver-reads-token-0123"
	srv, err := inbox.New(il.nc, inbox.Config{Token: token, Approver: true})
	must(t, err)
	must(t, srv.Start(ctx))
	t.Cleanup(func() { _ = srv.Stop(t.Context()) })
	h := srv.Handler()
	api := func(method, path string, body any, out any) int {
		b, _ := json.Marshal(body)
		req := httptest.NewRequest(method, path, strings.NewReader(string(b)))
		req.Header.Set(inbox.TokenHeader, token)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		must(t, json.Unmarshal(rec.Body.Bytes(), out))
		return rec.Code
	}
	var list struct {
		Calls []inbox.Item `json:"calls"`
	}
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		if api(http.MethodGet, "/api/calls", nil, &list); len(list.Calls) != 1 {
			return fmt.Errorf("the inbox lists %d calls, want 1", len(list.Calls))
		}
		return nil
	})
	it := list.Calls[0]
	var out inbox.Outcome
	if code := api(http.MethodPost, "/api/act", inbox.Act{Key: it.Key, Revision: it.Revision, InputDigest: it.InputDigest, Action: "allow"}, &out); code != http.StatusOK {
		t.Fatalf("allow %s: %d %+v", it.Key, code, out)
	}
	il.noViolations()
}
