package router

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/parked"
)

// TestParkedListOmitThrough: a page asked with omit_through lists the
// calls of revision at most it without input, context and user
// (input_omitted, the digest kept), whatever the room, and the newer ones
// whole: a poller that holds the older ones reads only what is new.
func TestParkedListOmitThrough(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	var recs []*parked.Record
	for i := range 4 {
		recs = append(recs, &parked.Record{Session: "s", ReplyID: fmt.Sprintf("r%d", i), Call: bus.Call{ID: "c1", Name: "ask", Input: json.RawMessage(`{"x":1}`)},
			InputDigest: "sha256:d", User: json.RawMessage(`"alice"`), Context: json.RawMessage(`{"ticket":1}`),
			Kind: bus.KindConfirm, Status: bus.ParkParked, Created: t0.Add(time.Duration(i) * time.Second), Rev: uint64(i + 1)})
	}
	page := parkedPage(recs, parkedCursor{}, 0, 1<<20, 2)
	if len(page.Parked) != 4 || page.Next != "" {
		t.Fatalf("page %+v", page)
	}
	for _, p := range page.Parked {
		old := p.Revision <= 2
		if p.InputOmitted != old || (p.Input == nil) != old || (p.Context == nil) != old || (p.User == nil) != old || p.InputDigest != "sha256:d" {
			t.Errorf("revision %d: %+v", p.Revision, p)
		}
	}
}
