package facade

import (
	"encoding/json"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttackTaskTTLOutlivesBound (session 26, red team): a host asking a
// TTL of 1 ms had each task leave the bound at once (its index entry was
// pruned by the next creation), while its record stayed in the bucket a
// day and took the call's result when it came, up to 1 MiB: a loop of
// task-augmented calls of a tool that returns its input stored a MiB per
// call for a day, past MaxTasks. A record past its TTL now takes no
// write, and one pruned from the index is deleted; a TTL past the
// bucket's age (math.MaxInt64 ms overflowed time.Duration to a negative
// TTL) is the bucket's age.
func TestAttackTaskTTLOutlivesBound(t *testing.T) {
	p := newPairWith(t, false, func(c *Config) { c.MaxTasks = 2 })
	const s, rounds = "lb-ttl", 6
	ev, err := p.bus.Watch(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	big := strings.Repeat("x", 200<<10)
	var ids []string
	for range rounds {
		res, rerr := p.rpc(t, "A", s, "alice", "tools/call",
			map[string]any{"name": "hello", "arguments": map[string]any{"name": big}, "task": map[string]any{"ttl": 1}}, false)
		if rerr != nil {
			t.Fatalf("task: %+v", rerr)
		}
		var created mcp.CreateTaskResult
		if err := json.Unmarshal(res, &created); err != nil || created.Task.TaskId == "" {
			t.Fatalf("create task: %.200s %v", res, err)
		}
		ids = append(ids, created.Task.TaskId)
		for m := testkit.Recv(t, ev.C, bound, "a batch.done"); m.Type != bus.TypeBatchDone; m = testkit.Recv(t, ev.C, bound, "a batch.done") {
		}
	}
	// The last run's end may still be on its way to the record: one more
	// creation prunes (and deletes) every record before it.
	p.startTaskTTL(t, "A", s, "alice", "hello", 60000)
	kv, err := p.backend[0].kv.bucket(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	kept, bytes := 0, 0
	for _, id := range ids {
		for _, kind := range []string{"t", "o"} { // the record, its result
			e, err := kv.Get(t.Context(), userKey(kind, s, "alice", id))
			if err != nil || len(e.Value()) == 0 {
				continue // deleted, or never written
			}
			kept++
			bytes += len(e.Value())
		}
	}
	if kept > 2 || bytes > 2*4096 {
		t.Fatalf("%d records and results of %d expired tasks kept, %d bytes, with MaxTasks 2", kept, rounds, bytes)
	}

	// TTLs out of range: the default for none, zero or a negative one, the
	// bucket's age for a huge one.
	for ttl, want := range map[int64]int64{0: DefaultTaskTTL.Milliseconds(), -5: DefaultTaskTTL.Milliseconds(), math.MinInt64: DefaultTaskTTL.Milliseconds(),
		math.MaxInt64: bus.MCPStateMaxAge.Milliseconds(), math.MaxInt64 / 1000: bus.MCPStateMaxAge.Milliseconds()} {
		res, rerr := p.rpc(t, "A", s, "bob-"+strconv.FormatInt(ttl, 10), "tools/call", // a user each: MaxTasks is 2
			map[string]any{"name": "hello", "arguments": map[string]any{}, "task": map[string]any{"ttl": ttl}}, false)
		if rerr != nil {
			t.Fatalf("task: %+v", rerr)
		}
		var created mcp.CreateTaskResult
		if err := json.Unmarshal(res, &created); err != nil || created.Task.TTL == nil || *created.Task.TTL != want {
			t.Fatalf("a TTL of %d ms: %s, %v; want %d ms", ttl, res, err, want)
		}
	}
}

// TestAttackTaskListReadsResults (session 26, red team: a residual risk):
// tasks/list read each task record whole, results included, so a host
// whose tasks completed with results near the record's bound had every
// listing read all of them (20 of 900 KiB: 236 ms a listing). A result is
// now kept under its own key, read by tasks/result (and a 2026-07-28
// tasks/get or notification): a listing reads the status records only, as
// the bytes the facade's connection receives while it lists show, and
// tasks/result still returns each result exactly. With TOOLBUS_MEASURE=1
// it measures 20 tasks of 1 byte and of 900 KiB instead:
//
//	TOOLBUS_MEASURE=1 go test -count=1 -run TestAttackTaskListReadsResults -v ./mcp/facade
func TestAttackTaskListReadsResults(t *testing.T) {
	n, sizes := 3, []int{128 << 10}
	measure := os.Getenv("TOOLBUS_MEASURE") == "1"
	if measure {
		n, sizes = 20, []int{1, 900 << 10}
	}
	p := newPairWith(t, false, func(c *Config) { c.MaxTasks = n })
	nc := p.backend[0].kv.nc
	for _, size := range sizes {
		s := "lb-list-" + strconv.Itoa(size)
		ids, want := make([]string, n), make([]string, n)
		for i := range n {
			want[i] = strconv.Itoa(i) + strings.Repeat("x", size)
			res, rerr := p.rpc(t, "A", s, "alice", "tools/call",
				map[string]any{"name": "hello", "arguments": map[string]any{"name": want[i]}, "task": map[string]any{"ttl": 600000}}, false)
			var created mcp.CreateTaskResult
			if rerr != nil || json.Unmarshal(res, &created) != nil {
				t.Fatalf("task: %.200s %+v", res, rerr)
			}
			ids[i] = created.Task.TaskId
		}
		for i, id := range ids { // waits for each end
			res, rerr := p.rpc(t, "A", s, "alice", "tasks/result", map[string]any{"taskId": id}, false)
			if rerr != nil {
				t.Fatalf("tasks/result: %+v", rerr)
			}
			if text, isErr := resultText(t, res); isErr || text != "hello "+want[i] {
				t.Fatalf("tasks/result of task %d: %d bytes, isError %v, not the call's result", i, len(text), isErr)
			}
		}
		const lists = 10
		before, start := nc.Stats().InBytes, time.Now()
		for range lists {
			res, rerr := p.rpc(t, "A", s, "alice", "tasks/list", nil, false)
			var list mcp.ListTasksResult
			if rerr != nil || json.Unmarshal(res, &list) != nil || len(list.Tasks) != n {
				t.Fatalf("tasks/list: %.300s %+v", res, rerr)
			}
			for _, tk := range list.Tasks {
				if tk.Status != mcp.TaskStatusCompleted {
					t.Fatalf("task %s is %s", tk.TaskId, tk.Status)
				}
			}
		}
		took, read := time.Since(start)/lists, (nc.Stats().InBytes-before)/lists
		t.Logf("tasks/list of %d tasks with results of %d bytes: %v and %d bytes received by the facade each", n, size, took, read)
		if size > 1 && read > uint64(size)/2 {
			t.Errorf("a listing of %d tasks received %d bytes: it read their results (%d bytes each)", n, read, size)
		}
	}
}
