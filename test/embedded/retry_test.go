package embedded

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// TestRetries: docs/protocol.md 5.3 — only read-only or idempotent tools with
// max_attempts > 1 are retried, and only on timeout or unavailable; a tool
// error is never retried.
func TestRetries(t *testing.T) {
	e := newEnv(t, 1)
	var mu sync.Mutex
	attempts := map[string][]int{} // session → attempts seen
	released := make(chan struct{})
	// flaky hangs (ignoring its context) on its first attempt and answers
	// on later ones.
	flaky := func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
		mu.Lock()
		attempts[c.SessionID] = append(attempts[c.SessionID], c.Attempt)
		mu.Unlock()
		if c.Attempt == 1 {
			<-released
		}
		return textResult(fmt.Sprintf("attempt %d", c.Attempt)), nil
	}
	failing := func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
		mu.Lock()
		attempts[c.SessionID] = append(attempts[c.SessionID], c.Attempt)
		mu.Unlock()
		return nil, errors.New("always fails")
	}
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "idem_flaky", Idempotent: true, MaxAttempts: 3, TimeoutMS: 1000}, flaky)
		handle(t, w, bus.ToolDef{Name: "ro_flaky", ReadOnly: true, MaxAttempts: 2, TimeoutMS: 1000}, flaky)
		handle(t, w, bus.ToolDef{Name: "plain_flaky", MaxAttempts: 3, TimeoutMS: 300}, flaky)
		handle(t, w, bus.ToolDef{Name: "idem_once", Idempotent: true, MaxAttempts: 1, TimeoutMS: 300}, flaky)
		handle(t, w, bus.ToolDef{Name: "idem_failing", Idempotent: true, MaxAttempts: 3}, failing)
	})
	t.Cleanup(func() { close(released) }) // before the worker stops
	e.waitLive("idem_flaky", "ro_flaky", "plain_flaky", "idem_once", "idem_failing")

	tests := []struct {
		tool         string
		wantAttempts []int
		wantCode     string // "" for success
		wantText     string
	}{
		{"idem_flaky", []int{1, 2}, "", "attempt 2"},
		{"ro_flaky", []int{1, 2}, "", "attempt 2"},
		{"plain_flaky", []int{1}, bus.CodeTimeout, "Tool execution timeout after 300ms"},
		{"idem_once", []int{1}, bus.CodeTimeout, "Tool execution timeout after 300ms"},
		{"idem_failing", []int{1}, bus.CodeToolError, ""},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			session := "retry-" + tt.tool
			r := e.call(t, session, []bus.Call{{ID: "c1", Name: tt.tool}}).Results[0]
			if tt.wantCode == "" {
				wantSuccess(t, r, tt.wantText)
			} else {
				wantFailure(t, r, bus.StateError, tt.wantCode, tt.wantText)
			}
			mu.Lock()
			got := fmt.Sprint(attempts[session])
			mu.Unlock()
			if got != fmt.Sprint(tt.wantAttempts) {
				t.Fatalf("the worker saw attempts %s, want %v", got, tt.wantAttempts)
			}
		})
	}
}
