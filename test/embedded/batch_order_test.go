package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// mark is the start or end of one call, as the worker saw it.
type mark struct {
	call    string
	start   bool
	at      time.Time
	running int // calls of the session running at this mark, itself included
}

// timelines records, per session, the starts and ends of calls in the order
// they happened (one lock, so the order is exact).
type timelines struct {
	mu      sync.Mutex
	marks   map[string][]mark
	running map[string]int
}

func (tl *timelines) begin(session, call string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.marks == nil {
		tl.marks, tl.running = map[string][]mark{}, map[string]int{}
	}
	tl.running[session]++
	tl.marks[session] = append(tl.marks[session], mark{call: call, start: true, at: time.Now(), running: tl.running[session]})
}

func (tl *timelines) end(session, call string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.marks[session] = append(tl.marks[session], mark{call: call, at: time.Now(), running: tl.running[session]})
	tl.running[session]--
}

func (tl *timelines) of(session string) []mark {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return append([]mark(nil), tl.marks[session]...)
}

// barriers lets n calls wait for each other: a call passes once all n have
// arrived, which proves they ran at the same time.
type barriers struct {
	mu      sync.Mutex
	arrived map[string]int
	open    signals
}

func (b *barriers) arrive(ctx context.Context, group string, n int) error {
	b.mu.Lock()
	if b.arrived == nil {
		b.arrived = map[string]int{}
	}
	b.arrived[group]++
	if b.arrived[group] == n {
		b.open.fire(group)
	}
	b.mu.Unlock()
	if !b.open.wait(ctx, group) {
		return fmt.Errorf("barrier %s: the other %d call(s) never started while this one ran", group, n-1)
	}
	return nil
}

type pairIn struct {
	Group string `json:"group"`
	N     int    `json:"n"`
}

// TestBatchConcurrency checks docs/protocol.md 5.2 with the worker's own record
// of starts and ends: the calls of a run of concurrency-safe calls overlap
// (each waits at a barrier for all the others), an unsafe call overlaps
// nothing, runs go one after another, and results come in call order.
func TestBatchConcurrency(t *testing.T) {
	e := newEnv(t, 1)
	var tl timelines
	var bar barriers
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "safe_wait", ConcurrencySafe: true,
			InputSchema: objectSchema(`{"group":{"type":"string"},"n":{"type":"integer"}}`, "group", "n")},
			func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
				tl.begin(c.SessionID, c.ID)
				defer tl.end(c.SessionID, c.ID)
				var in pairIn
				if err := json.Unmarshal(c.Input, &in); err != nil {
					return nil, err
				}
				if err := bar.arrive(ctx, c.SessionID+"/"+in.Group, in.N); err != nil {
					return nil, err
				}
				return textResult("safe " + c.ID), nil
			})
		handle(t, w, bus.ToolDef{Name: "unsafe_step", ConcurrencySafe: false},
			func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
				tl.begin(c.SessionID, c.ID)
				defer tl.end(c.SessionID, c.ID)
				// Simulated work: a window in which an overlapping call
				// would show up in the timeline.
				select {
				case <-time.After(30 * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return textResult("unsafe " + c.ID), nil
			})
	})
	e.waitLive("safe_wait", "unsafe_step")

	// S: safe_wait, U: unsafe_step, ?: an unknown tool (counts as safe).
	tests := []struct{ name, shape string }{
		{"two safe calls overlap", "S S"},
		{"four safe calls overlap", "S S S S"},
		{"unsafe call splits safe runs", "S S U S S"},
		{"adjacent unsafe calls run one by one", "U U U"},
		{"unknown tool counts as safe", "S ? S"},
		{"unsafe at both ends", "U S S S U"},
		{"alternating", "S U S U S"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			session := fmt.Sprintf("order-%d", i)
			kinds := strings.Fields(tt.shape)
			// Split into runs as docs/protocol.md 5.2 prescribes.
			var runs [][]int
			for j, k := range kinds {
				if k == "U" || len(runs) == 0 || kinds[j-1] == "U" {
					runs = append(runs, nil)
				}
				runs[len(runs)-1] = append(runs[len(runs)-1], j)
			}
			calls := make([]bus.Call, len(kinds))
			runOf := map[string]int{}
			for r, run := range runs {
				safe := 0
				for _, j := range run {
					if kinds[j] == "S" {
						safe++
					}
				}
				for _, j := range run {
					id := fmt.Sprintf("c%d", j)
					runOf[id] = r
					switch kinds[j] {
					case "S":
						calls[j] = bus.Call{ID: id, Name: "safe_wait", Input: json.RawMessage(fmt.Sprintf(`{"group":"run%d","n":%d}`, r, safe))}
					case "U":
						calls[j] = bus.Call{ID: id, Name: "unsafe_step"}
					case "?":
						calls[j] = bus.Call{ID: id, Name: "no_such_tool"}
					}
				}
			}
			reply := e.call(t, session, calls)
			for j, c := range calls {
				switch kinds[j] {
				case "S":
					wantSuccess(t, reply.Results[j], "safe "+c.ID)
				case "U":
					wantSuccess(t, reply.Results[j], "unsafe "+c.ID)
				case "?":
					wantFailure(t, reply.Results[j], bus.StateError, bus.CodeUnknownTool, "")
				}
			}
			checkTimeline(t, tl.of(session), kinds, calls, runOf)
		})
	}
}

// checkTimeline checks the recorded marks against the runs of the batch.
func checkTimeline(t *testing.T, marks []mark, kinds []string, calls []bus.Call, runOf map[string]int) {
	t.Helper()
	type interval struct {
		start, end     int // indexes in marks
		startAt, endAt time.Time
		runningAtStart int
		runningAtEnd   int
	}
	iv := map[string]*interval{}
	for i, m := range marks {
		v := iv[m.call]
		if v == nil {
			v = &interval{start: -1, end: -1}
			iv[m.call] = v
		}
		if m.start {
			if v.start >= 0 {
				t.Fatalf("call %s started twice", m.call)
			}
			v.start, v.startAt, v.runningAtStart = i, m.at, m.running
		} else {
			v.end, v.endAt, v.runningAtEnd = i, m.at, m.running
		}
	}
	var real []string
	for j, c := range calls {
		if kinds[j] == "?" {
			if iv[c.ID] != nil {
				t.Fatalf("unknown tool call %s reached a worker", c.ID)
			}
			continue
		}
		if v := iv[c.ID]; v == nil || v.start < 0 || v.end < 0 {
			t.Fatalf("call %s has no complete interval in %+v", c.ID, marks)
		}
		real = append(real, c.ID)
	}
	if len(iv) != len(real) {
		t.Fatalf("the worker saw %d calls, want %d", len(iv), len(real))
	}
	for x, a := range real {
		va := iv[a]
		for _, b := range real[x+1:] {
			vb := iv[b]
			switch {
			case runOf[a] == runOf[b]:
				// Same safe run: the intervals intersect.
				if !(va.start < vb.end && vb.start < va.end) || va.startAt.After(vb.endAt) || vb.startAt.After(va.endAt) {
					t.Errorf("safe calls %s and %s of one run did not overlap: %+v %+v", a, b, *va, *vb)
				}
			case runOf[a] < runOf[b]:
				// Runs go one after another: a ended before b started.
				if va.end > vb.start || va.endAt.After(vb.startAt) {
					t.Errorf("call %s (run %d) ended after %s (run %d) started", a, runOf[a], b, runOf[b])
				}
			}
		}
	}
	for j, c := range calls {
		if kinds[j] != "U" {
			continue
		}
		v := iv[c.ID]
		if v.end != v.start+1 || v.runningAtStart != 1 || v.runningAtEnd != 1 {
			t.Errorf("unsafe call %s overlapped another call: %+v in %+v", c.ID, *v, marks)
		}
	}
	if t.Failed() {
		t.Logf("timeline: %+v", marks)
	}
}
