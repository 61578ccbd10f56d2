package conformance

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestForeignClientRoundTrip is the promise of docs/protocol.md: a client
// written from the docs alone registers a tool, calls it, and reads its
// events, both live and from the P_EVENTS stream after the fact.
func TestForeignClientRoundTrip(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) {
		var in struct {
			City string `json:"city"`
		}
		_ = json.Unmarshal(c.Call.Input, &in)
		c.text("4°C, rain in " + in.City)
	}, def("get_weather", M{"read_only": true, "input_schema": M{"type": "object",
		"properties": M{"city": M{"type": "string"}}, "required": []string{"city"}}}))

	ev := s.watch(t, "s1")
	reply := s.call(t, "s1", "turn1", callsData(Call{ID: "toolu_01", Name: "get_weather", Input: M{"city": "Oslo"}}))
	wantIDs(t, "reply", reply.Results, "toolu_01")
	wantSuccess(t, reply.Results[0], "4°C, rain in Oslo")
	if len(reply.Parked) != 0 {
		t.Fatalf("parked %v, want none", reply.Parked)
	}
	es := ev.until(doneOf("turn1"))
	done := checkBatchEvents(t, es, "s1", "turn1", "toolu_01")
	wantSuccess(t, done[0], "4°C, rain in Oslo")

	// An agent that reconnects reads the same events from the stream.
	ctx := t.Context()
	st, err := s.js.Stream(ctx, "TOOLBUS_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"toolbus.events.s1"}})
	if err != nil {
		t.Fatal(err)
	}
	var stored []*Event
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(bound))
		if err != nil {
			t.Fatalf("stream: %v after %d events", err, len(stored))
		}
		e := decodeEvent(t, natsMsg(m))
		stored = append(stored, e)
		if doneOf("turn1")(e) {
			break
		}
	}
	checkBatchEvents(t, stored, "s1", "turn1", "toolu_01")
	if len(stored) != len(es) {
		t.Errorf("stream kept %d events, live subscriber saw %d", len(stored), len(es))
	}
}
