package offload_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttackVerifiedCacheCycled (session 33, red team): an agent reads one
// output, then 600 small outputs of its own, then the first again. The
// server remembered 512 verified objects, so the last read verified the
// object whole again (each read of a cycled object costs its whole size in
// reads and hashing); it now holds far more, bounded by their chunks. Seen
// without a counter: once the object is known, one of its chunks is
// deleted, and a read of its first window is still served (a second
// verification would find it incomplete).
func TestAttackVerifiedCacheCycled(t *testing.T) {
	f := newFixture(t, 1000)
	target := f.store(t, "s1.r0.c1", strings.Repeat("x", 300<<10)) // three chunks
	if _, err := f.srv.Serve(t.Context(), "s1", offload.Get{URL: target.URL, Max: 10}); err != nil {
		t.Fatal(err)
	}
	for i := range 600 {
		b := f.store(t, "s1.r"+strconv.Itoa(i+1)+".c1", strings.Repeat("y", 2000))
		if _, err := f.srv.Serve(t.Context(), "s1", offload.Get{URL: b.URL, Max: 10}); err != nil {
			t.Fatal(i, err)
		}
	}
	ref, err := offload.ParseRef(target.URL)
	if err != nil {
		t.Fatal(err)
	}
	info, err := f.obs.GetInfo(t.Context(), ref.Name)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := f.js.Stream(t.Context(), "OBJ_o_outputs")
	if err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(t.Context(), "$O.o_outputs.C."+info.NUID)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(t.Context(), last.Sequence); err != nil {
		t.Fatal(err)
	}
	c, err := f.srv.Serve(t.Context(), "s1", offload.Get{URL: target.URL, Max: 10})
	if err != nil {
		t.Fatalf("the first window after 600 other reads: %v (verified again)", err)
	}
	if string(c.Data) != "xxxxxxxxxx" {
		t.Fatalf("got %q", c.Data)
	}
}

// BenchmarkAttackCycledRead: what one read of a byte costs a router for a
// 64 MiB output it knows ("known") and for one cycled out of its cache
// ("cycled": verified whole again); their ratio is the amplification.
func BenchmarkAttackCycledRead(b *testing.B) {
	s := testkit.RunServer(b)
	nc := testkit.Connect(b, s)
	js := testkit.JetStream(b, nc)
	if _, err := js.CreateObjectStore(b.Context(), jetstream.ObjectStoreConfig{Bucket: "o_outputs", Storage: jetstream.MemoryStorage}); err != nil {
		b.Fatal(err)
	}
	off, _ := offload.New(nc, "o_outputs", offload.Limits{Inline: 1000, Max: 65 << 20})
	out, err := off.Fit(b.Context(), "s1.r1.c1", bus.Text(strings.Repeat("0123456789abcdef", 4<<20)), 0, false)
	if err != nil {
		b.Fatal(err)
	}
	st := offload.NewStore(nc, "o_outputs")
	known := offload.NewServer(st, offload.Window(nc.MaxPayload()))
	b.Run("known", func(b *testing.B) {
		for b.Loop() {
			if _, err := known.Serve(b.Context(), "s1", offload.Get{URL: out[1].URL, Max: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cycled", func(b *testing.B) {
		for b.Loop() {
			sv := offload.NewServer(st, offload.Window(nc.MaxPayload()))
			if _, err := sv.Serve(b.Context(), "s1", offload.Get{URL: out[1].URL, Max: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzDecodeGet (session 33, red team: an agent's output.get data): no data
// panics the decoder, and what it takes names a url and no negative offset
// or max.
func FuzzDecodeGet(f *testing.F) {
	f.Add([]byte(`{"url":"nats-object://o_outputs/s1.r.c#sha256=00","offset":5,"max":10}`))
	f.Add([]byte(`{"url":"x","offset":-1}`))
	f.Add([]byte(`{"url":"x","offset":1e30}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := offload.DecodeGet(data)
		if err == nil && (g.URL == "" || g.Offset < 0 || g.Max < 0) {
			t.Fatalf("taken: %+v", g)
		}
	})
}
