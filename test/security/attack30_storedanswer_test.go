package security

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/security"
)

// TestAttackStoredAnswerForeignRef (session 30, red team on session 29's
// answers stored by reference): beside a parked input of 900 KiB, the
// router stores an answer's output by reference (5.9) where the ending
// write would pass the max payload; a handler hides a block referring to another session's stored output in
// such an answer, hoping the reference escapes the seal once the router
// stores the output itself. It is refused as any answer naming another
// call's object is, and the answer without it is stored and read back.
func TestAttackStoredAnswerForeignRef(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	s1 := d.conn("session-s1").client()
	ref := bigRef(t, s1, "victim")
	s3l := d.conn("session-s3")
	s3, limit := s3l.client(), int(s3l.nc.MaxPayload())
	reply, err := s3.Call(testCtx(t), "s3", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "pick", Input: []byte(`{"x":"` + strings.Repeat("x", 900<<10) + `"}`)}}},
		client.WithReplyID("r1"))
	must(t, err)
	if len(reply.Parked) != 1 {
		t.Fatalf("pick did not park: %+v", reply)
	}
	hl := d.conn("handler-picker")
	big := bus.Text(strings.Repeat("answer ", (limit-600<<10)/7))
	for _, out := range [][]bus.Block{append(big, bus.Block{Type: bus.BlockData, MediaType: "text/plain", URL: ref}),
		append([]bus.Block{{Type: bus.BlockData, MediaType: "text/plain", URL: ref}}, big...)} {
		err = hl.client().Parked().Answer(testCtx(t), "pick", "s3", "r1", "c1", bus.Answer{State: bus.StateSuccess, Output: out})
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, "does not start with the call's key") {
			t.Fatalf("an answer stored by reference with s1's output inside: %v", err)
		}
	}
	ev, err := s3.Watch(testCtx(t), "s3")
	must(t, err)
	defer ev.Stop(t.Context())
	must(t, hl.client().Parked().Answer(testCtx(t), "pick", "s3", "r1", "c1", bus.Answer{State: bus.StateSuccess, Output: big}))
	var res bus.Result
	must(t, waitType(t, ev, bus.TypeCallResult).DataAs(&res))
	stored := 0
	for _, b := range res.Output { // a preview and the stored output, under the call's key only
		if b.URL == "" {
			continue
		}
		if !strings.HasPrefix(b.URL, "nats-object://toolbus_outputs/s3.r1.c1.") {
			t.Fatalf("the answer's result refers to %s", b.URL)
		}
		got, err := s3.Outputs().FetchBytes(testCtx(t), b.URL)
		must(t, err)
		if string(got) != big[0].Text {
			t.Fatalf("read back %d bytes, want the answer's %d", len(got), len(big[0].Text))
		}
		stored++
	}
	if stored != 1 {
		t.Fatalf("the answer's result: %.300v", res)
	}
	// The ended record holds the answer by reference (the path attacked).
	js, err := jetstream.New(d.conn(security.RoleRouter).nc)
	must(t, err)
	kv, err := js.KeyValue(testCtx(t), bus.NewSubjects("").Bucket(bus.BucketParked))
	must(t, err)
	rec, err := kv.Get(testCtx(t), bus.CallKey("s3", "r1", "c1"))
	must(t, err)
	if !strings.Contains(string(rec.Value()), "nats-object://toolbus_outputs/s3.r1.c1.") {
		t.Fatalf("the record holds no stored answer (%d bytes)", len(rec.Value()))
	}
	hl.noViolations()
}
