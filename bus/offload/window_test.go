package offload_test

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestPutWindowShared: puts that run together on one Offloader share its
// window, so what the connection holds unacknowledged stays within it
// whatever the number of calls storing at once (sessions 33-41 gave each
// put two chunks: eight puts held sixteen), and every output reads back
// whole.
func TestPutWindowShared(t *testing.T) {
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	js := testkit.JetStream(t, nc)
	if _, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: "w_outputs", Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	o, err := offload.New(nc, "w_outputs", offload.Limits{Inline: 1000})
	if err != nil {
		t.Fatal(err)
	}
	const window = 2
	offload.SetPutWindow(o, window*offload.ChunkSize)
	var most atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // nats.go's own count of unacknowledged publishes
		defer close(sampled)
		for {
			if n := int64(offload.Unacknowledged(o)); n > most.Load() {
				most.Store(n)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	const puts = 8
	texts := make([]string, puts)
	refs := make([]string, puts)
	var wg sync.WaitGroup
	for i := range puts {
		texts[i] = strings.Repeat(fmt.Sprintf("%d", i), 1<<20+i)
		wg.Go(func() {
			out, err := o.Fit(t.Context(), fmt.Sprintf("s.r.c%d", i), bus.Text(texts[i]), 0, false)
			if err != nil || len(out) != 2 {
				t.Errorf("put %d: %v", i, err)
				return
			}
			refs[i] = out[1].URL
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	if most.Load() > window {
		t.Errorf("%d chunks unacknowledged at once, more than the window's %d", most.Load(), window)
	}
	if n := offload.Room(o); n != 0 {
		t.Errorf("the window counts %d chunks after every put ended", n)
	}
	st := offload.NewStore(nc, "w_outputs")
	for i, ref := range refs {
		if ref == "" {
			continue
		}
		obj, err := st.Open(t.Context(), ref)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(obj)
		obj.Close()
		if err != nil || string(b) != texts[i] {
			t.Errorf("output %d read back %d bytes (%v), want %d", i, len(b), err, len(texts[i]))
		}
	}
}

// TestPutWindowFreedOnFailure: a put that fails (no store to take its
// chunks) gives its room back, so a window of one chunk still serves the
// next put: a leaked token would stall every later put of the worker.
func TestPutWindowFreedOnFailure(t *testing.T) {
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	o, err := offload.New(nc, "late_outputs", offload.Limits{Inline: 1000})
	if err != nil {
		t.Fatal(err)
	}
	offload.SetPutWindow(o, offload.ChunkSize)
	big := bus.Text(strings.Repeat("z", 3*offload.ChunkSize))
	for range 3 {
		if _, err := o.Fit(t.Context(), "s.r.c", big, 0, false); err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("a put with no store: %v", err)
		}
		if n := offload.Room(o); n != 0 {
			t.Fatalf("a failed put left %d chunks counted in the window", n)
		}
	}
	js := testkit.JetStream(t, nc)
	if _, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: "late_outputs", Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if out, err := o.Fit(testkit.Within(t, testkit.SetupWait), "s.r.c", big, 0, false); err != nil || len(out) != 2 {
		t.Fatalf("a put once the store exists: %v", err)
	}
}
