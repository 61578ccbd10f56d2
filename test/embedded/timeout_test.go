package embedded

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/worker"
)

// TestTimeout: a tool that outlives its timeout_ms, or the batch's
// expirytime when that comes first, ends with a timeout result, and the
// worker's context for the call ends too.
func TestTimeout(t *testing.T) {
	e := newEnv(t, 1)
	var sig signals
	// stubborn ignores its context (it is released when the test ends);
	// polite returns ctx.Err() as soon as its context ends, as most Go code
	// does. Both tell the test when their context ended.
	released := make(chan struct{})
	stubborn := func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
		go func() {
			select {
			case <-ctx.Done():
				sig.fire(c.SessionID + "/ctx-done")
			case <-released:
			}
		}()
		<-released
		return textResult("released"), nil
	}
	polite := func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
		select {
		case <-ctx.Done():
			sig.fire(c.SessionID + "/ctx-done")
			return nil, ctx.Err()
		case <-time.After(bound):
			return textResult("never timed out"), nil
		}
	}
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "stubborn_short", TimeoutMS: 200}, stubborn)
		handle(t, w, bus.ToolDef{Name: "stubborn_long", TimeoutMS: 60000}, stubborn)
		handle(t, w, bus.ToolDef{Name: "polite_short", TimeoutMS: 200}, polite)
		handle(t, w, bus.ToolDef{Name: "polite_long", TimeoutMS: 60000}, polite)
	})
	t.Cleanup(func() { close(released) }) // before the worker stops (cleanups run last first)
	e.waitLive("stubborn_short", "stubborn_long", "polite_short", "polite_long")

	tests := []struct {
		name   string
		tool   string
		expiry time.Duration // 0: none
		exact  string        // the exact text, or "" to check the duration range
		maxDur time.Duration
	}{
		{name: "timeout_ms", tool: "stubborn_short", exact: "Tool execution timeout after 200ms"},
		{name: "later expirytime does not extend timeout_ms", tool: "stubborn_short", expiry: time.Minute,
			exact: "Tool execution timeout after 200ms"},
		{name: "expirytime shortens timeout_ms", tool: "stubborn_long", expiry: 2 * time.Second, maxDur: 2 * time.Second},
		{name: "timeout_ms, tool honours its context", tool: "polite_short", exact: "Tool execution timeout after 200ms"},
		{name: "expirytime, tool honours its context", tool: "polite_long", expiry: 2 * time.Second, maxDur: 2 * time.Second},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			session := fmt.Sprintf("timeout-%d", i)
			var opts []client.CallOption
			if tt.expiry > 0 {
				opts = append(opts, client.WithExpiry(time.Now().Add(tt.expiry)))
			}
			start := time.Now()
			reply := e.call(t, session, []bus.Call{{ID: "c1", Name: tt.tool}}, opts...)
			elapsed := time.Since(start)
			r := reply.Results[0]
			wantFailure(t, r, bus.StateError, bus.CodeTimeout, tt.exact)
			if tt.exact == "" {
				d, ok := strings.CutPrefix(textOf(r), "Tool execution timeout after ")
				dur, err := time.ParseDuration(d)
				if !ok || err != nil || dur <= 0 || dur > tt.maxDur {
					t.Fatalf("text %q: want \"Tool execution timeout after <Go duration in (0, %v]>\"", textOf(r), tt.maxDur)
				}
			}
			if elapsed > 30*time.Second {
				t.Fatalf("the timeout took %v", elapsed)
			}
			waitClosed(t, sig.ch(session+"/ctx-done"), "the tool's context to end")
		})
	}
}
