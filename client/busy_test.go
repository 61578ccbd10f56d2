package client_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestBusyRetried: a busy reply (docs/protocol.md 1: nothing ran) is sent again,
// with the same event, until a router takes it; other errors are not.
func TestBusyRetried(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	var asked atomic.Int32
	ids := make(chan string, 10)
	sub, err := nc.Subscribe("toolbus.call.s1", func(m *nats.Msg) {
		e, err := bus.Decode(m)
		if err != nil {
			t.Error(err)
			return
		}
		ids <- e.ID
		if asked.Add(1) <= 2 {
			_ = bus.RespondError(nc, m, "test/router", &bus.Error{Code: bus.CodeBusy, Message: bus.BusyText})
			return
		}
		_ = bus.Respond(nc, m, "test/router", bus.TypeCallReply, bus.Reply{Results: []bus.Result{{ID: "c1", Name: "x", State: bus.StateSuccess}}, Parked: []bus.Parked{}})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	c := client.New(nc, client.Config{Source: "test/agent", Timeout: 30 * time.Second})
	if _, err := c.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "x"}}}, client.WithReplyID("r1")); err != nil {
		t.Fatalf("after two busy replies: %v", err)
	}
	if n := asked.Load(); n != 3 {
		t.Fatalf("sent %d times, want 3", n)
	}
	for range 3 {
		if id := <-ids; id != "r1" {
			t.Fatalf("re-sent with id %q, want the same event", id)
		}
	}

	// Another error is returned at once.
	sub2, err := nc.Subscribe("toolbus.call.s2", func(m *nats.Msg) {
		_ = bus.RespondError(nc, m, "test/router", &bus.Error{Code: bus.CodeBadRequest, Message: "no"})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Unsubscribe()
	if _, err := c.Call(t.Context(), "s2", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "x"}}}); !errors.Is(err, bus.ErrBadRequest) {
		t.Fatalf("bad_request: %v", err)
	}
}

// TestForgedReplyIDs (session 32, red team of the SDKs): whoever answers
// first on the call subject could name calls never sent, one twice, or
// leave one out; protocol 3.2 says each call of the batch appears once,
// finished or parked. Such a reply is refused bad_event, with or without
// call options; a reply that names each call once is taken.
func TestForgedReplyIDs(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	done := func(id string) bus.Result { return bus.Result{ID: id, Name: "x", State: bus.StateSuccess} }
	replies := make(chan bus.Reply, 1)
	sub, err := nc.Subscribe("toolbus.call.s1", func(m *nats.Msg) {
		_ = bus.Respond(nc, m, "test/router", bus.TypeCallReply, <-replies)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	c := client.New(nc, client.Config{Source: "test/agent", Timeout: 30 * time.Second})
	batch := bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "x"}, {ID: "c2", Name: "x"}}}
	for _, tc := range []struct {
		name  string
		reply bus.Reply
		ok    bool
	}{
		{"each once", bus.Reply{Results: []bus.Result{done("c2")}, Parked: []bus.Parked{{ID: "c1", Name: "x"}}}, true},
		{"a call never sent", bus.Reply{Results: []bus.Result{done("c1"), done("c9")}}, false},
		{"one twice", bus.Reply{Results: []bus.Result{done("c1"), done("c1")}}, false},
		{"one twice, finished and parked", bus.Reply{Results: []bus.Result{done("c1"), done("c2")}, Parked: []bus.Parked{{ID: "c1"}}}, false},
		{"one left out", bus.Reply{Results: []bus.Result{done("c1")}}, false},
	} {
		for _, opts := range [][]client.CallOption{nil, {client.WithReplyID("r1")}} {
			replies <- tc.reply
			_, err := c.Call(t.Context(), "s1", batch, opts...)
			if tc.ok != (err == nil) || err != nil && !errors.Is(err, bus.ErrBadEvent) {
				t.Fatalf("%s (%d options): %v", tc.name, len(opts), err)
			}
		}
	}
}
