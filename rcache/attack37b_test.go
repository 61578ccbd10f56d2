package rcache

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// restartHook is a JetStream that runs between after each update of a
// bucket's config New makes: another router's call storing its result
// while this one starts.
type restartHook struct {
	jetstream.JetStream
	between func()
}

func (h restartHook) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := h.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
	h.between()
	return kv, err
}

func (h restartHook) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := h.JetStream.UpdateStream(ctx, cfg)
	h.between()
	return st, err
}

// TestAttack37bRestartKeepsDiscardOld (session 37, red team b): a router's
// start made the full bucket discard new again (CreateOrUpdateKeyValue
// sets it) until its UpdateStream put discard old back, so another
// router's result finished in between was refused: not cached (Put's error
// is ignored, the call's result is returned after one more KV read). Every
// update a start makes keeps the bucket discarding its oldest; an entry
// evicted is created again (Create's expected revision on a subject the
// bound emptied).
func TestAttack37bRestartKeepsDiscardOld(t *testing.T) {
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	s := bus.NewSubjects(bus.DefaultPrefix)
	const bound = 1 << 20
	c, err := New(t.Context(), js, s, Config{MaxBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	d, big := def(ScopeGlobal), strings.Repeat("x", 200<<10)
	n := 0
	put := func() (string, bool) { // a new input's result
		n++
		key, _ := Key(d, "s1", "", json.RawMessage(fmt.Sprintf(`{"q":%d}`, n)))
		return key, c.Put(t.Context(), key, MaxTTL, ok(big))
	}
	first, _ := put()
	for range 10 { // the bucket at its bound
		put()
	}
	var refused []string
	h := restartHook{JetStream: js, between: func() {
		st, err := js.Stream(t.Context(), "KV_"+s.Bucket(Bucket))
		if err != nil {
			t.Fatal(err)
		}
		if dp := st.CachedInfo().Config.Discard; dp != jetstream.DiscardOld {
			refused = append(refused, "discard "+dp.String())
		}
		if key, stored := put(); !stored {
			refused = append(refused, key)
		}
	}}
	if _, err := New(t.Context(), h, s, Config{MaxBytes: bound}); err != nil { // a restart
		t.Fatal(err)
	}
	if len(refused) > 0 {
		t.Fatalf("a full bucket refused results while a router started: %v", refused)
	}
	if _, hit := c.Get(t.Context(), first); hit {
		t.Fatal("the first result was not evicted")
	}
	if !c.Put(t.Context(), first, MaxTTL, ok(big)) {
		t.Fatal("an evicted entry is not created again")
	}
	if _, hit := c.Get(t.Context(), first); !hit {
		t.Fatal("an evicted entry created again is not served")
	}
}
