package security

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// TestAttackCancelFloodGoWorker (session 31, red team; closed): a
// session agent publishes four cancels on its own P.cancel.s1, each naming
// 100,000 made-up call ids. Every worker reads every session's cancels
// (one that overtakes its exec must stop it), and the Go worker's
// callTable remembers each named key for two minutes with no bound,
// scanning them all at each cancel: this process's heap kept 34 MB once
// it settled (with the worker's map bounded at 65,536, a trial edit, it
// passed 3 of 3), and so would every Go worker on the bus. Go, Python and
// Java workers keep at most 65,536 valid ones since session 31 (python/tests
// test_attack31.py::test_attack_cancel_flood, java JsonAttackTest.cancelFloodBounded).
func TestAttackCancelFloodGoWorker(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	agent := d.conn("session-s1")
	for n := range 4 {
		ids := make([]string, 100_000)
		for i := range ids {
			ids[i] = fmt.Sprintf("f%dx%d", n, i)
		}
		e, err := bus.NewEvent(bus.TypeCallCancel, "attacker", bus.Cancel{Calls: ids})
		must(t, err)
		e.SessionID, e.ReplyID = "s1", fmt.Sprintf("flood%d", n)
		m, err := e.Msg("toolbus.cancel.s1")
		must(t, err)
		must(t, agent.nc.PublishMsg(m))
	}
	must(t, agent.nc.Flush())
	// The router and the worker read them on subscriptions of their own:
	// bounded polling until the heap settles (the decoding's garbage gone),
	// then what stays is what they keep.
	last := heap()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		time.Sleep(200 * time.Millisecond)
		now := heap()
		if max(now, last)-min(now, last) < 256<<10 {
			last = now
			break
		}
		last = now
	}
	if grew := last - min(before, last); grew > 24<<20 {
		t.Fatalf("the process's heap kept %d MB after 400,000 cancelled ids", grew>>20)
	}
}
