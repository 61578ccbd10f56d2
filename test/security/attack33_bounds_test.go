package security

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/store"
)

// TestAttackOutputsFillDisk (session 32's red team on 5.9, closed in 1.23):
// an agent whose tools make large outputs, or any worker, could fill the
// store's disk through P_outputs, which had no bound by default. Now the
// bucket keeps at most store.DefaultOutputsMaxMsgs messages of at most
// store.OutputsMaxMsgSize bytes (about 4.25 GiB, nothing reserved): a
// worker's oversized message is refused, and a full bucket refuses a new
// output (the call's result says so) while every stored one still reads.
func TestAttackOutputsFillDisk(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	s1 := d.conn("session-s1")
	old := bigRef(t, s1.client(), "r1")

	op := d.conn("operator")
	js := testkit.JetStream(t, op.nc)
	stream, err := js.Stream(testCtx(t), outputsStream)
	must(t, err)
	info, err := stream.Info(testCtx(t))
	must(t, err)
	c := info.Config
	if c.MaxMsgs != store.DefaultOutputsMaxMsgs || c.MaxMsgSize != store.OutputsMaxMsgSize || c.Discard != jetstream.DiscardNew || c.MaxBytes != -1 {
		t.Fatalf("outputs bounds: max_msgs %d, max_msg_size %d, discard %v, max_bytes %d", c.MaxMsgs, c.MaxMsgSize, c.Discard, c.MaxBytes)
	}

	ev, err := js.Stream(testCtx(t), "TOOLBUS_EVENTS")
	must(t, err)
	if ei, err := ev.Info(testCtx(t)); err != nil || ei.Config.MaxBytes != store.DefaultEventsMaxBytes {
		t.Fatalf("the events stream's default bound: %v %v", ei, err) // TestAttackEventsFillDisk
	}

	// A worker may publish chunks, but none larger than a chunk and its
	// headers: 4 GiB cannot hide in fewer messages.
	wjs, err := jetstream.New(d.conn("worker").nc)
	must(t, err)
	if _, err := wjs.Publish(testCtx(t), "$O.toolbus_outputs.C.forged", make([]byte, store.OutputsMaxMsgSize+1)); err == nil || !strings.Contains(err.Error(), "maximum") {
		t.Fatalf("an oversized chunk: %v", err)
	}
	if _, err := wjs.Publish(testCtx(t), "$O.toolbus_outputs.C.forged", make([]byte, 128<<10)); err != nil {
		t.Fatalf("a chunk of 128 KiB: %v", err)
	}

	// The bucket full: the stream's bound lowered to what it holds stands
	// in for 32,768 messages.
	info, err = stream.Info(testCtx(t))
	must(t, err)
	c.MaxMsgs = int64(info.State.Msgs)
	_, err = js.UpdateStream(testCtx(t), c)
	must(t, err)
	reply, err := s1.client().Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "bigread"}}})
	must(t, err)
	r := reply.Results[0]
	if r.State != bus.StateError || len(r.Output) != 1 || !strings.Contains(r.Output[0].Text, "could not be stored") {
		t.Fatalf("a new output into a full bucket: %s %.300v", r.State, r.Output)
	}
	if b, err := s1.client().Outputs().FetchBytes(testCtx(t), old); err != nil || len(b) != 2<<20 {
		t.Fatalf("the output stored before the bucket filled: %d bytes, %v", len(b), err)
	}
}

// TestAttackEventsFillDisk (session 33, closed in 1.23): every batch leaves
// its batch.done in the events stream (about 470 bytes for one read-only
// call) for 24 hours, and the stream had no byte bound unless the operator
// set one, so an agent's flood of cheap calls filled the store's disk (a
// few hundred GB a day at the bench's rate). Now the stream keeps at most
// store.DefaultEventsMaxBytes, the oldest events going first; here a
// small bound stands in for it: a flood of twice the bound leaves the
// stream within it, and the latest batch's batch.done is stored.
func TestAttackEventsFillDisk(t *testing.T) {
	const limit = 256 << 10
	d := newDeployment(t, func(c *router.Config) { c.Store.EventsMaxBytes = limit })
	d.startWorker()
	s1 := d.conn("session-s1").client()
	js := testkit.JetStream(t, d.conn("operator").nc)
	stream, err := js.Stream(testCtx(t), "TOOLBUS_EVENTS")
	must(t, err)
	calls := make([]bus.Call, 16)
	for i := range calls {
		calls[i] = bus.Call{ID: fmt.Sprintf("c%d", i), Name: "greet"}
	}
	last := ""
	for i := range 200 { // a batch.done of 16 results is about 3 KB: 600 KB in all
		last = fmt.Sprintf("flood%d", i)
		_, err := s1.Call(testCtx(t), "s1", bus.Batch{Calls: calls}, client.WithReplyID(last))
		must(t, err)
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		m, err := stream.GetLastMsgForSubject(testCtx(t), "toolbus.events.s1")
		if err != nil || !strings.Contains(string(m.Data), last) {
			return fmt.Errorf("the last batch.done not stored yet (%v)", err)
		}
		return nil
	})
	info, err := stream.Info(testCtx(t))
	must(t, err)
	if info.Config.MaxBytes != limit || info.Config.Discard != jetstream.DiscardOld || info.State.Bytes > limit || info.State.FirstSeq < 2 {
		t.Fatalf("events stream: max_bytes %d, discard %v, holds %d bytes from seq %d", info.Config.MaxBytes, info.Config.Discard, info.State.Bytes, info.State.FirstSeq)
	}
}
