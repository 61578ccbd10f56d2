package router

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// While the store is full, a call that finds no live worker is told the
// store is full (the workers' heartbeats are refused too), not that no
// worker serves the tool.
func TestStoreFullOr(t *testing.T) {
	call := bus.Call{ID: "c1", Name: "t"}
	none := unavailable(call)
	var h store.Health
	if got := storeFullOr(call, &h, &none); got != &none {
		t.Fatalf("with the store healthy: %+v", got)
	}
	h.Note(&jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"})
	got := storeFullOr(call, &h, &none)
	if got.Error.Code != bus.CodeInternal || textOf(got.Output) != "InternalError: store full: no live worker of tool 't' can be seen while JetStream refuses the workers' heartbeats (insufficient resources); it did not run. Call it again once the operator has freed space." {
		t.Fatalf("with the store full: %+v", got)
	}
}
