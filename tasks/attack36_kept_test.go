package tasks_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/tasks"
)

// TestAttack36EndedTasksKept (session 36, red team on 5.10: left, measured):
// the bounds count running tasks only (8 per session, 32 per user), and an
// ended task's record, with its call's input and result, stays Keep (24 h)
// in P_tasks, which has no byte bound. An agent with any tool it can run
// past its timeout (a shell's sleep) and "background": true makes 8 tasks
// per timeout: at 30 s, 23,040 records a day per session, each up to an
// input and a result of the server's max payload; and every list (the
// list_tasks tool, wait_async_results without ids) reads them all, one
// message get each. Here: 100 ended tasks of 16 KiB input and result in
// one session, with a running bound of 2.
func TestAttack36EndedTasksKept(t *testing.T) {
	const n, size = 100, 16 << 10
	st := newStore(t, tasks.Config{MaxPerSession: 2})
	ctx := t.Context()
	big, _ := json.Marshal(strings.Repeat("x", size))
	for i := range n {
		r := rec("s1", fmt.Sprintf("k%d", i), "", time.Now().Add(time.Hour))
		r.Input = big
		if _, _, err := st.Admit(ctx, r); err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
		res := bus.Result{ID: r.CallID, Name: "t", State: bus.StateSuccess, Output: []bus.Block{{Type: bus.BlockText, Text: string(big)}}}
		if _, _, err := st.Finish(ctx, "s1", r.ID, res); err != nil {
			t.Fatalf("finish %d: %v", i, err)
		}
	}
	start := time.Now()
	recs, err := st.List(ctx, "s1")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	var read int
	for _, r := range recs {
		b, _ := json.Marshal(r)
		read += len(b)
	}
	t.Logf("%d ended tasks kept in one session (running bound 2); one list read %d records, %d bytes, in %v", n, len(recs), read, took)
	if len(recs) > 64 {
		t.Skipf("LEFT (docs/security.md, session 36): ended tasks are not bounded per session and P_tasks has no byte bound: %d records, %d bytes per list", len(recs), read)
	}
}
