package security

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
)

// TestAttackEventsFloodHidesParkedResult (session 34, red team on 1.23's
// events bound): an agent of session s2 floods the events stream past its
// byte bound (discard old) right after a parked call of s1 was answered, so
// that s1's reconnecting agent finds neither the call's call.result nor its
// batch.done on replay (3.4 allows it). The answer is not lost: s1 re-sends
// the batch under its reply id and gets the answer's result from the
// ended record (6.1), nothing run or parked again, although the record
// holds the 2 KiB input by its digest only (1.23); a copy whose input
// differs, even by one byte of the same length, is refused and learns
// nothing of the answer.
func TestAttackEventsFloodHidesParkedResult(t *testing.T) {
	const limit = 256 << 10
	d := newDeployment(t, func(c *router.Config) { c.Store.EventsMaxBytes = limit })
	d.startWorker()
	s1, s2 := d.conn("session-s1").client(), d.conn("session-s2").client()
	input := func(c byte) []byte { return []byte(`{"x":"` + strings.Repeat(string(c), 2<<10) + `"}`) }
	batch := func(in []byte) bus.Batch { return bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "pick", Input: in}}} }
	reply, err := s1.Call(testCtx(t), "s1", batch(input('a')), client.WithReplyID("r1"))
	must(t, err)
	if len(reply.Parked) != 1 {
		t.Fatalf("pick did not park: %+v", reply)
	}
	must(t, d.conn("handler-picker").client().Parked().Answer(testCtx(t), "pick", "s1", "r1", "c1",
		bus.Answer{State: bus.StateSuccess, Output: bus.Text("the picked answer")}))
	js := testkit.JetStream(t, d.conn("operator").nc)
	stream, err := js.Stream(testCtx(t), "TOOLBUS_EVENTS")
	must(t, err)
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		m, err := stream.GetLastMsgForSubject(testCtx(t), "toolbus.events.s1")
		if err != nil || !strings.Contains(string(m.Data), "the picked answer") {
			return fmt.Errorf("the answer's events not stored yet (%v)", err)
		}
		return nil
	})
	calls := make([]bus.Call, 16)
	for i := range calls {
		calls[i] = bus.Call{ID: fmt.Sprintf("c%d", i), Name: "greet"}
	}
	for i := range 200 { // about 600 KB of s2's batch.done
		_, err := s2.Call(testCtx(t), "s2", bus.Batch{Calls: calls}, client.WithReplyID(fmt.Sprintf("flood%d", i)))
		must(t, err)
	}
	if _, err := stream.GetLastMsgForSubject(testCtx(t), "toolbus.events.s1"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("s1's events are still in the stream after the flood (%v): the attack did not happen", err)
	}
	other := input('a')
	other[len(other)-3] = 'b'
	_, err = s1.Call(testCtx(t), "s1", batch(other), client.WithReplyID("r1"))
	t.Logf("a copy with another input: %v", err)
	if err == nil || !strings.Contains(err.Error(), "input") {
		t.Fatalf("a copy with another input of the same length: %v", err)
	}
	again, err := s1.Call(testCtx(t), "s1", batch(input('a')), client.WithReplyID("r1"))
	must(t, err)
	if len(again.Parked) != 0 || len(again.Results) != 1 || again.Results[0].State != bus.StateSuccess ||
		len(again.Results[0].Output) != 1 || again.Results[0].Output[0].Text != "the picked answer" {
		t.Fatalf("the re-sent batch after the flood: %+v", again)
	}
}
