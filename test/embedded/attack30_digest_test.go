package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// TestAttackOmittedInputDigest (session 30, red team on protocol 1.19): a
// reply that lists a parked call without its input gives its input_digest,
// which a confirmation must name; an agent crafts the input so that another
// encoding of it would hash otherwise: insignificant whitespace, characters
// an encoder escapes (<, &, U+2028), escapes a decoder unfolds (\u00e9),
// duplicate keys. The reply's digest is the record's, which parked.list
// lists and a confirmation is checked against (router checkDigest).
func TestAttackOmittedInputDigest(t *testing.T) {
	e := standalone(t)
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true})
	max := int(e.nc.MaxPayload())
	hostile := func(n int) json.RawMessage {
		head := "{ \"k\" : \"<&>\u2028\\u00e9\\/\" ,\n\t\"k\":\"dup\", \"pad\": \""
		return json.RawMessage(head + strings.Repeat("x", n-len(head)-3) + "\" }")
	}
	omitted := 0
	for n := (max - 700) / 2; n < (max-200)/2 && omitted == 0; n += 25 {
		id := "r" + strconv.Itoa(n)
		ctx, cancel := context.WithTimeout(t.Context(), readyBound)
		r, err := e.client.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c0", Name: "ask", Input: hostile(n)}, {ID: "c1", Name: "ask", Input: hostile(n)}}},
			client.WithReplyID(id))
		cancel()
		if errors.Is(err, nats.ErrMaxPayload) {
			break
		}
		if err != nil || len(r.Parked) != 2 {
			t.Fatalf("two inputs of %d bytes: %v", n, err)
		}
		for _, p := range r.Parked {
			rec := parkedRecord(t, e, "s1", id, p.ID)
			if !p.InputOmitted {
				continue
			}
			omitted++
			// The record holds the input re-encoded (<, & and > escaped), so
			// the digest is never recomputed from it: the record's is given.
			if p.InputDigest != rec.InputDigest {
				t.Fatalf("%s.%s: the reply's digest %s, the record's %s", id, p.ID, p.InputDigest, rec.InputDigest)
			}
			var list bus.ParkedPage
			if err := e.client.Admin(testCtx(t), "parked.list", "s1", nil, &list); err != nil {
				t.Fatal(err)
			}
			for _, l := range list.Parked {
				if l.ReplyID == id && l.ID == p.ID && l.InputDigest != p.InputDigest {
					t.Fatalf("parked.list lists %s with digest %s, the reply %s", p.ID, l.InputDigest, p.InputDigest)
				}
			}
		}
	}
	if omitted == 0 {
		t.Fatal("no input was left out: the bound was not reached")
	}
}
