package worker

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestAttack41CancelMemoryBound (redteam41, java41's remembered cancel id):
// an agent fills a worker's memory of cancels with the largest keys and
// ids it may send: 128-character session, reply and call ids, one call a
// cancel so that every key keeps its own 128-character cancel id, and
// keeps on past the bound. The memory holds maxCancels keys and its size
// stays put once full (the arrival order slice slides, it does not grow):
// at most ~700 bytes a key, ~45 MiB in all (measured: go test -v).
func TestAttack41CancelMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 65,536 keys several times")
	}
	ct := newCallTable(bus.NewSubjects(""))
	session, reply := strings.Repeat("s", 128), strings.Repeat("r", 128)
	msg := func(i int) {
		e, err := bus.NewEvent(bus.TypeCallCancel, "test", bus.Cancel{Calls: []string{fmt.Sprintf("%0128d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		e.ID = fmt.Sprintf("%0127dx", i)
		e.ReplyID = reply
		m, err := e.Msg("toolbus.cancel." + session)
		if err != nil {
			t.Fatal(err)
		}
		ct.onCancel(m)
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	i := 0
	for ; i < maxCancels; i++ {
		msg(i)
	}
	full := heap()
	for ; i < 4*maxCancels; i++ {
		msg(i)
	}
	after := heap()
	ct.mu.Lock()
	n, order, seen := len(ct.cancelled), len(ct.order), ct.cancelled[bus.CallKey(session, reply, fmt.Sprintf("%0128d", i-1))]
	ct.mu.Unlock()
	if n != maxCancels || order != maxCancels {
		t.Fatalf("remembers %d keys (%d in order), want %d", n, order, maxCancels)
	}
	if seen.id != fmt.Sprintf("%0127dx", i-1) {
		t.Fatalf("the last cancel's id %q not kept", seen.id)
	}
	perKey := float64(full-base) / maxCancels
	t.Logf("full: %.1f MiB (%.0f B a key); after 3x more: %.1f MiB", float64(full-base)/(1<<20), perKey, float64(after-base)/(1<<20))
	if perKey > 1024 {
		t.Errorf("%.0f bytes a remembered cancel, want at most 1 KiB", perKey)
	}
	if after > full+full/4 {
		t.Errorf("the memory grew from %d to %d bytes past its bound", full-base, after-base)
	}
	runtime.KeepAlive(ct)
}
