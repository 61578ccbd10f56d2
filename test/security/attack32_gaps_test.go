package security

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
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
