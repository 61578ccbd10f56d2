package registry_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/store"
)

// A store that refuses writes for want of space refuses the workers'
// beats too: the router that takes a beat keeps the worker live (by its
// own clock), acknowledges the beat, and notes the store full; the worker
// goes when its beats stop, as ever.
func TestBeatsWithTheStoreFull(t *testing.T) {
	srv := testkit.RunServer(t)
	nc := testkit.Connect(t, srv)
	js := testkit.JetStream(t, nc)
	st, err := store.Setup(t.Context(), js, bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: hb})
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock(time.Now())
	r := start(t, st, registry.Config{Now: clk.Now})
	accepted(t, register(t, r, "w1", def("echo")), "echo")
	tool, _ := r.Lookup("echo")
	limits := map[string]server.JetStreamAccountLimits{"": {MaxMemory: 1, MaxStore: 1, MaxStreams: -1, MaxConsumers: -1, MaxAckPending: -1}}
	if err := srv.GlobalAccount().UpdateJetStreamLimits(limits); err != nil {
		t.Fatal(err)
	}
	for range 5 { // five beats, none stored
		clk.Add(2 * hb)
		accepted(t, register(t, r, "w1", def("echo")), "echo")
		if !r.Live(tool) {
			t.Fatal("a worker whose beats the store refused is not live")
		}
	}
	if full, why, _ := st.Health.Full(); !full || why == "" {
		t.Fatalf("the store's health after refused beats: %v %q", full, why)
	}
	clk.Add(4 * hb)
	if r.Live(tool) {
		t.Fatal("a worker that stopped beating is live")
	}
	if err := srv.GlobalAccount().UpdateJetStreamLimits(nil); err != nil {
		t.Fatal(err)
	}
	accepted(t, register(t, r, "w1", def("echo")), "echo")
	if full, _, _ := st.Health.Full(); full || !r.Live(tool) {
		t.Fatalf("after space came back: full %v, live %v", full, r.Live(tool))
	}
}
