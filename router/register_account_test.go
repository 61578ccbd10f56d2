package router_test

import (
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
)

// TestRegistrationClaimsNoAccount: on a deployment without accounts, a
// registration carrying its own Nats-Request-Info (an account claimed, which
// only the server may name, across a service import with its _R_. reply) is
// refused bad_request and binds nothing; without it the id is bound to no
// account (protocol 7.1, 1.20).
func TestRegistrationClaimsNoAccount(t *testing.T) {
	d := xtest.Run(t, xtest.Config{Routers: 1})
	nc, err := d.Connect(t.Context(), "worker")
	if err != nil {
		t.Fatal(err)
	}
	s := bus.NewSubjects("")
	def := bus.ToolDef{Name: "greet", Description: "Greets.", InputSchema: json.RawMessage(`{"type":"object"}`)}
	send := func(claim string) *bus.Event {
		ev, err := bus.NewEvent(bus.TypeRegister, "toolbus/worker/w1", bus.Register{Worker: "w1", Tools: []bus.ToolDef{def}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := ev.Msg(s.Workers.Register("greet"))
		if err != nil {
			t.Fatal(err)
		}
		if claim != "" {
			m.Header.Set(bus.HeaderRequestInfo, claim)
		}
		reply, err := nc.RequestMsgWithContext(t.Context(), m)
		if err != nil {
			t.Fatal(err)
		}
		e, err := bus.Decode(reply)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, claim := range []string{`{"acc":"toolbus-worker-a"}`, `{"acc":""}`, `not json`} {
		var be bus.Error
		if e := send(claim); e.Type != bus.TypeError || e.DataAs(&be) != nil || be.Code != bus.CodeBadRequest {
			t.Fatalf("claim %s: %+v, want bad_request", claim, e)
		}
	}
	if e := send(""); e.Type != bus.TypeRegisterAck {
		t.Fatalf("without a claim: %+v", e)
	}
	if e := send(""); e.Type != bus.TypeRegisterAck {
		t.Fatalf("a beat without a claim: %+v", e)
	}
}
