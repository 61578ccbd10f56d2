package security

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackTaskOutputFreeBlocks (session 34, red team on 5.10): a task's
// output is its last 32 KiB, but a router counted only a block's text,
// data and url, so a worker whose progress blocks carried their bytes in
// other fields (a description, a name, a title, a uri: 40 KiB each in 7
// events) made every read of the task hold and send all of
// it: the cursor kept it in the router's memory (256 tasks), and at the
// progress pace a task running an hour holds about 900 MB. Now a block
// counts as its JSON encoding, so the output stays within its bound plus
// the one newest block.
func TestAttackTaskOutputFreeBlocks(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	release := make(chan struct{})
	defer close(release)
	startTool(t, d, bus.ToolDef{Name: "slow", Description: "Runs past its timeout.", ReadOnly: true, ConcurrencySafe: true,
		TimeoutMS: 200, Background: true},
		func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
			big := strings.Repeat("x", 40<<10)
			for _, b := range []bus.Block{{Description: big}, {Name: big}, {Title: big}, {URI: big}, {Description: big}, {Name: big}, {Title: big}} {
				b.Type = bus.BlockText // 7 events and the last: the progress burst
				_ = c.Progress(b)
			}
			_ = c.Progress(bus.Text("end")...)
			<-release
			return &bus.ExecResult{Output: bus.Text("slow done")}, nil
		})
	ac := d.conn("session-s1").client()
	id := startTask(t, ac)
	deadline := time.Now().Add(bound)
	for {
		_, out, err := ac.Tasks().Output(testCtx(t), "s1", id)
		must(t, err)
		if n := len(out); n > 0 && out[n-1].Text == "end" {
			b, err := json.Marshal(out)
			must(t, err)
			t.Logf("the task's output: %d blocks, %d bytes of JSON", n, len(b))
			if len(b) > bus.MaxTaskOutputLen+bus.MaxProgress {
				t.Fatalf("the task's output is %d blocks, %d bytes of JSON: past its %d bytes and one event's", n, len(b), bus.MaxTaskOutputLen)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the task's last progress never came in its output")
		}
	}
}
