package client_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestCancelBound: a cancel of more than bus.MaxCancelCalls ids is refused
// bad_event and nothing is published (routers and workers would drop it
// whole, docs/protocol.md 3.5); one of exactly that many is sent.
func TestCancelBound(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	sub, err := nc.SubscribeSync("toolbus.cancel.s1")
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(nc, client.Config{Source: "test/agent"})
	ids := make([]string, bus.MaxCancelCalls+1)
	for i := range ids {
		ids[i] = fmt.Sprintf("c%d", i)
	}
	if err := c.Cancel(t.Context(), "s1", "r1", ids...); !errors.Is(err, bus.ErrBadEvent) {
		t.Fatalf("a cancel of %d ids: %v, want bad_event", len(ids), err)
	}
	if err := c.Cancel(t.Context(), "s1", "r1", ids[:bus.MaxCancelCalls]...); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e, err := bus.Decode(m)
	if err != nil {
		t.Fatal(err)
	}
	var cn bus.Cancel
	if err := e.DataAs(&cn); err != nil || len(cn.Calls) != bus.MaxCancelCalls {
		t.Fatalf("the first cancel published names %d ids (%v), want the bounded one's %d", len(cn.Calls), err, bus.MaxCancelCalls)
	}
}
