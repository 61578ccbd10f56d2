package embedded

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// TestAttackReplyPastMaxPayload (red team, session 17): an agent parks
// calls whose inputs together pass the server's max payload (each batch is
// under it). The router's reply to parked.list over every session was
// larger than any message, its publish failed, and the router logged it
// and sent nothing: the operator's `toolbus parked` (and every lookup
// through it) waited for its timeout, for every session, as long as the
// calls stayed parked. A reply past the max payload is an
// io.toolbus.error limit_exceeded instead (router TestReplyPastMaxPayload),
// and since 1.18 parked.list answers a page under the max payload, with
// next: every call listed once across its pages.
func TestAttackReplyPastMaxPayload(t *testing.T) {
	e := newEnv(t, 1)
	e.registerDefs(t, bus.ToolDef{Name: "ext_big", External: true})
	const each = 1 << 19 // under a call input's bound (1 MiB)
	big := strings.Repeat("x", each)
	for i := range int(e.nc.MaxPayload())/each + 1 {
		reply := fmt.Sprintf("r%d", i)
		input, _ := json.Marshal(map[string]string{"x": big})
		r, err := e.client.Call(testCtx(t), "big-a", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "ext_big", Input: input}}}, client.WithReplyID(reply))
		if err != nil || len(r.Parked) != 1 {
			t.Fatalf("batch %s: %+v %v", reply, r, err)
		}
	}
	// The fault was no answer at all: any deadline shows it, and the
	// router encodes the calls' 8 MiB before it finds the reply too large,
	// which took over 10 s (bound) under -race at load 16.
	m, err := bus.SendRequest(testCtx(t), e.nc, e.client.Subjects().Admin("parked.list"), newEvent(t, bus.TypeAdmin, struct{}{}))
	if err != nil {
		t.Fatalf("parked.list of every session while one session's parked inputs pass the max payload: %v", err)
	}
	ev, err := bus.Decode(m)
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		Parked []bus.ParkedCall `json:"parked"`
		Next   string           `json:"next"`
	}
	if ev.Type != bus.TypeAdminReply || ev.DataAs(&page) != nil || len(m.Data) > int(e.nc.MaxPayload()) {
		t.Fatalf("reply %s %.200s", ev.Type, ev.Data)
	}
	omitted := 0
	for _, p := range page.Parked {
		if p.InputOmitted {
			omitted++
		}
	}
	if want := int(e.nc.MaxPayload())/each + 1; len(page.Parked) != want || omitted == 0 || page.Next != "" {
		t.Fatalf("the page lists %d calls (%d without input), next %q; want all %d, some without input, no next", len(page.Parked), omitted, page.Next, want)
	}
}
