package registry

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestRegisterCountsBeforeWriting: on a real bucket whose liveness write
// is held up (a loaded server takes 100-500 ms a write), a heartbeat that
// lists a new call in flight counts while its write waits, so the exec
// watchdog does not end that call as vanished (mcp/bridge
// TestHostileServerBounded's flood did).
func TestRegisterCountsBeforeWriting(t *testing.T) {
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	st, err := store.Setup(t.Context(), js, bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := New(st, Config{Heartbeat: time.Second})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, r.Stop)
	d := bus.ToolDef{Name: "t", Description: "Tool t.", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}
	beat := func(inflight ...string) bus.Register {
		return bus.Register{Worker: "w1", Tools: []bus.ToolDef{d}, InFlight: map[string][]string{"t": append([]string{}, inflight...)}}
	}
	if ack, err := r.Register(t.Context(), Shared, "", beat()); err != nil || len(ack.Accepted) != 1 {
		t.Fatalf("register: %+v %v", ack, err)
	}
	held := &heldKV{KeyValue: st.Workers, writing: make(chan struct{}), release: make(chan struct{})}
	r.liveness.kv = held
	done := make(chan error, 1)
	go func() {
		_, err := r.Register(t.Context(), Shared, "", beat("s.r.c"))
		done <- err
	}()
	select {
	case <-held.writing:
	case err := <-done:
		t.Fatalf("the beat was applied without a liveness write: %v", err)
	}
	holds := r.MayHold("t", "s.r.c")
	close(held.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !holds {
		t.Fatal("a beat listing the call did not count while its liveness write waited")
	}
	if !r.MayHold("t", "s.r.c") {
		t.Fatal("the beat does not count once stored")
	}
}

// heldKV holds up the first liveness write until release is closed,
// saying so on writing.
type heldKV struct {
	jetstream.KeyValue
	writing, release chan struct{}
}

func (h *heldKV) hold() {
	select {
	case <-h.writing:
	default:
		close(h.writing)
		<-h.release
	}
}

func (h *heldKV) Update(ctx context.Context, key string, v []byte, rev uint64) (uint64, error) {
	h.hold()
	return h.KeyValue.Update(ctx, key, v, rev)
}

func (h *heldKV) Create(ctx context.Context, key string, v []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	h.hold()
	return h.KeyValue.Create(ctx, key, v, opts...)
}
