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

// TestAttack36EndedTasksKept (session 36, red team on 5.10): the bounds
// counted running tasks only (8 per session, 32 per user), and an ended
// task's record, with its call's input and result, stays Keep (24 h) in
// P_tasks. An agent with any tool it can run past its timeout (a shell's
// sleep) and "background": true made 8 tasks per timeout (at 30 s, 23,040
// records a day per session, each up to two max payloads), and every list
// (list_tasks, wait_async_results without ids) read them all: 100 ended
// tasks of 16 KiB input and result, one list 3.3 MB. MaxKept now bounds
// the tasks a session keeps, each counted until Keep after its deadline.
func TestAttack36EndedTasksKept(t *testing.T) {
	const kept = 16
	st := newStore(t, tasks.Config{MaxPerSession: 2, MaxKept: kept, Keep: time.Hour})
	ctx := t.Context()
	big, _ := json.Marshal(strings.Repeat("x", 16<<10))
	for i := range kept + 1 {
		r := rec("s1", fmt.Sprintf("k%d", i), "", time.Now().Add(time.Hour))
		r.Input = big
		_, _, err := st.Admit(ctx, r)
		if i == kept {
			if !isCode(err, bus.CodeLimitExceeded) || !strings.Contains(err.Error(), "keeps 16 background tasks, running or ended") {
				t.Fatalf("task %d past the kept bound (the first %d ended): %v", i, kept, err)
			}
			break
		}
		if err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
		res := bus.Result{ID: r.CallID, Name: "t", State: bus.StateSuccess, Output: []bus.Block{{Type: bus.BlockText, Text: string(big)}}}
		if _, _, err := st.Finish(ctx, "s1", r.ID, res); err != nil {
			t.Fatalf("finish %d: %v", i, err)
		}
	}
	if recs, err := st.List(ctx, "s1"); err != nil || len(recs) != kept {
		t.Fatalf("list: %d records, %v; want %d", len(recs), err, kept)
	}
	// Another session has its own bound; a task counts until Keep past its
	// deadline, so ones that lapsed hold nothing.
	for i := range kept + 4 {
		if _, _, err := st.Admit(ctx, rec("s2", fmt.Sprintf("old%d", i), "", time.Now().Add(-2*time.Hour))); err != nil {
			t.Fatalf("lapsed task %d: %v", i, err)
		}
	}
}
