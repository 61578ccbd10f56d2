package inbox

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// TestAttack40bApproveBlind (session 40, red team on flake40's omit_through:
// held): a session's agent parks a confirm call whose input the router's
// list leaves out (too large for a page, or past the poll's 16 reads), and
// the approver, shown the call without its input, allows it, its digest
// taken from the page: an approval of an input nobody saw. The inbox
// refuses to answer a call it holds without its input; reading it again
// (the answer's refresh) still without its input changes nothing.
func TestAttack40bApproveBlind(t *testing.T) {
	rr := routerReads{records: newRecords(10, true, slog.New(slog.DiscardHandler))}
	p := bus.ParkedCall{Session: "s1", ReplyID: "r1", ID: "c1", Name: "deploy", InputDigest: "sha256:abc", InputOmitted: true,
		Kind: bus.KindConfirm, Revision: 7, Created: time.Now(), Expires: time.Now().Add(time.Hour)}
	key := bus.CallKey(p.Session, p.ReplyID, p.ID)
	reads := 0
	rr.fetch = func(context.Context, string) (reading, error) { reads++; return rr.readingOf(p), nil }
	rr.set(key, rr.readingOf(p))
	s := &Server{records: rr.records} // no client: an answer sent would panic
	code, out := s.act(t.Context(), Act{Key: key, Revision: 7, InputDigest: p.InputDigest, Action: "allow"})
	if code != http.StatusConflict || out.OK || out.Code != bus.CodeBadRequest || reads != 1 {
		t.Fatalf("an allow of a call held without its input: %d %+v (%d reads)", code, out, reads)
	}
}

// TestAttack40bStaleInputHeld (session 40, red team on flake40's reads once
// a revision: held): a session's agent re-parks a call (a re-sent copy, an
// updated record) with another input after the inbox read its first one,
// hoping the page shows the new record (its revision, so an allow is taken)
// beside the old input. A listed call without its input takes the held one
// only at the same revision; otherwise it stays without an input, and
// unanswerable, until read on its own.
func TestAttack40bStaleInputHeld(t *testing.T) {
	rr := routerReads{records: newRecords(10, true, slog.New(slog.DiscardHandler))}
	old := bus.ParkedCall{Session: "s1", ReplyID: "r1", ID: "c1", Name: "deploy", Input: []byte(`{"env":"staging"}`),
		Kind: bus.KindConfirm, Revision: 5, Created: time.Now(), Expires: time.Now().Add(time.Hour)}
	key := bus.CallKey(old.Session, old.ReplyID, old.ID)
	rr.set(key, rr.readingOf(old))
	now := old
	now.Input, now.InputOmitted, now.InputDigest, now.Revision = nil, true, bus.InputDigest([]byte(`{"env":"prod"}`)), 9
	reads := 0 // none left: the page of the call alone is not asked for
	rr.set(key, rr.readingOf(rr.whole(t.Context(), now, "", &reads)))
	it, ok := rr.lookup(key)
	if !ok || it.Revision != 9 || len(it.Input) > 0 || !it.InputOmitted || it.Note == "" {
		t.Fatalf("revision 9 held as %+v", it)
	}
}
