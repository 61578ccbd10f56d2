package security

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackOutputReadAmplified (session 32, red team on 5.9): a router
// reads and hashes a whole stored output the first time it serves it. An
// agent sends 32 reads of 64 bytes of its own fresh 32 MiB output at once:
// each made the router read and hash the whole object (32 times one read's
// time and more); the concurrent first reads now share one verification,
// so they take about as long as one.
func TestAttackOutputReadAmplified(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	big := strings.Repeat("0123456789abcdef", 2<<20) // 32 MiB
	startTool(t, d, bus.ToolDef{Name: "huge", Description: "A 32 MiB output.", ReadOnly: true},
		func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return &bus.ExecResult{Output: bus.Text(big)}, nil
		})
	ac := d.conn("session-s1").client()
	ref := func(replyID string) string { return storedRef(t, ac, "s1", replyID, "huge") }
	nc := d.conn("session-s1").nc
	window := func(u string) error { // 64 bytes: what is served costs nothing
		e, err := bus.NewEvent(offload.TypeGet, "attacker", offload.Get{URL: u, Max: 64})
		must(t, err)
		e.SessionID = "s1"
		m, err := bus.SendRequest(testCtx(t), nc, "toolbus.outputs.s1", e)
		if err != nil {
			return err
		}
		got, err := bus.Decode(m)
		if err == nil && got.Type != offload.TypeChunk {
			err = fmt.Errorf("a %s: %s", got.Type, got.Data)
		}
		return err
	}
	one := ref("one")
	start := time.Now()
	must(t, window(one))
	single := time.Since(start)

	many := ref("many")
	const n = 32
	var wg sync.WaitGroup
	start = time.Now()
	for range n {
		wg.Go(func() {
			if err := window(many); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	all := time.Since(start)
	t.Logf("one first read %v; %d at once %v", single, n, all)
	if all > 4*single+time.Second {
		t.Fatalf("%d concurrent first reads took %v, one %v: each read the whole object", n, all, single)
	}
}
