package security

import (
	"context"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// TestAttack42ConcurrentWindows (session 42, red team on 5.9's reads): a
// session agent asks for the largest window (2 MiB, 2.7 MiB in base64) of
// its own stored output many times at once. Each read held its window,
// its base64 and its event in the router's memory until answered, and
// reads took only the router's general slots (4096): 128 at once held
// hundreds of MiB, 4096 would hold some 30 GiB. The windows a router holds
// at once are now bounded by bytes (offload.MaxWindow times 8); a read
// past it waits for room within its budget. (The live heap is measured as
// the collector last saw it; the replies are counted and dropped.)
func TestAttack42ConcurrentWindows(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	big := strings.Repeat("0123456789abcdef", 2<<20) // 32 MiB
	startTool(t, d, bus.ToolDef{Name: "huge", Description: "A 32 MiB output.", ReadOnly: true},
		func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return &bus.ExecResult{Output: bus.Text(big)}, nil
		})
	ac := d.conn("session-s1").client()
	u := storedRef(t, ac, "s1", "r1", "huge")
	nc := d.conn("session-s1").nc

	// The replies are counted and dropped as they come (the test's own
	// memory is not the router's).
	inbox := "_INBOX.session-s1.attack42"
	var got atomic.Int64
	var last atomic.Pointer[nats.Msg]
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) { last.Store(m); got.Add(1) })
	must(t, err)
	defer sub.Unsubscribe()
	must(t, sub.SetPendingLimits(-1, -1))

	heap := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	read := func() uint64 { metrics.Read(heap); return heap[0].Value.Uint64() }
	base := read()
	const n = 128
	for i := range n {
		e, err := bus.NewEvent(offload.TypeGet, "attacker", offload.Get{URL: u, Offset: int64(i%16) << 21})
		must(t, err)
		e.SessionID = "s1"
		m, err := e.Msg("toolbus.outputs.s1")
		must(t, err)
		m.Reply = inbox
		must(t, nc.PublishMsg(m))
	}
	var peak uint64
	testkit.CheckFor(t, 2*time.Minute, time.Millisecond, func() error {
		if peak = max(peak, read()); peak > base+256<<20 {
			t.Fatalf("the router held %d MiB of live heap for %d concurrent windows of 2 MiB (%d answered)", (peak-base)>>20, n, got.Load())
		}
		if got.Load() < n {
			return context.DeadlineExceeded
		}
		return nil
	})
	if e, err := bus.Decode(last.Load()); err != nil || e.Type != offload.TypeChunk {
		t.Fatalf("a reply that is no chunk: %v %.200s", err, last.Load().Data)
	}
	t.Logf("%d reads of 2 MiB windows at once: live heap from %d MiB to a peak of %d MiB", n, base>>20, peak>>20)
}
