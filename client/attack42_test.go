package client_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttack42FetchSizePastCeiling (session 42, red team): a hostile
// router, or whoever answers on P.outputs.<s> first, says the object is
// 1 TiB: the Go client's FetchBytes kept asking for windows and keeping
// their bytes (the digest is checked at the end), as Python's and Java's
// fetch did until session 33. The first window's size past the output
// ceiling (MaxOutput, 64 MiB) is now refused before any other is asked.
func TestAttack42FetchSizePastCeiling(t *testing.T) {
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	const digest = "5a1f0c9e2b7d4a3c8e6f1b0d9c2a7e4f3b8d6c1a0e9f2b7c4d3a8e6f1b0c9d2a"
	ref := "nats-object://toolbus_outputs/s1.r1.c1.n.0#sha256=" + digest
	var asked atomic.Int64
	window := make([]byte, 1<<20)
	sub, err := nc.Subscribe(bus.NewSubjects("").Outputs("s1"), func(m *nats.Msg) {
		g, _ := bus.Decode(m)
		var get offload.Get
		_ = g.DataAs(&get)
		if asked.Add(1) > 80 { // bounded before the fix: an error ends the read
			_ = m.Respond([]byte("stop"))
			return
		}
		e, _ := bus.NewEvent(offload.TypeChunk, "fake-router", offload.Chunk{URL: ref, MediaType: "text/plain",
			Size: 1 << 40, Digest: digest, Offset: get.Offset, Data: window})
		e.SessionID = "s1"
		r, _ := e.Msg(m.Reply)
		_ = nc.PublishMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	cl := client.New(testkit.Connect(t, s), client.Config{})
	_, err = cl.Outputs().FetchBytes(t.Context(), ref)
	if n := asked.Load(); err == nil || n > 1 || !strings.Contains(err.Error(), "ceiling") {
		t.Fatalf("a 1 TiB object: %d windows asked, %v", n, err)
	}
}
