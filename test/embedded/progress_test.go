package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/worker"
)

// TestProgress: progress a tool emits reaches its own session's watchers in
// order, never another session's, and never becomes part of the result.
func TestProgress(t *testing.T) {
	e := newEnv(t, 1)
	var bar barriers
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "steps", ConcurrencySafe: true},
			func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
				for i := 1; i <= 2; i++ {
					if err := c.Progress(bus.Text(fmt.Sprintf("%s step %d", c.SessionID, i))...); err != nil {
						return nil, err
					}
				}
				// Both sessions' calls run at once.
				if err := bar.arrive(ctx, "both-sessions", 2); err != nil {
					return nil, err
				}
				return textResult("done"), nil
			})
	})
	e.waitLive("steps")

	sessions := []string{"progress-a", "progress-b"}
	watchers := map[string]*client.Events{}
	for _, s := range sessions {
		watchers[s] = e.watch(t, s)
	}
	type out struct {
		session string
		reply   *bus.Reply
		err     error
	}
	replies := make(chan out, len(sessions))
	replyIDs := map[string]string{}
	for _, s := range sessions {
		id := client.NewReplyID()
		replyIDs[s] = id
		ctx := testCtx(t)
		go func() {
			r, err := e.client.Call(ctx, s, bus.Batch{Calls: []bus.Call{{ID: "p1", Name: "steps"}}}, client.WithReplyID(id))
			replies <- out{s, r, err}
		}()
	}
	for range sessions {
		select {
		case o := <-replies:
			if o.err != nil {
				t.Fatalf("%s: %v", o.session, o.err)
			}
			r := o.reply.Results[0]
			wantSuccess(t, r, "done")
			if len(r.Output) != 1 {
				t.Errorf("%s: progress leaked into the result: %s", o.session, jsonOf(r))
			}
		case <-time.After(bound):
			t.Fatal("a reply never came")
		}
	}
	for _, s := range sessions {
		events := collect(t, watchers[s], batchDone(replyIDs[s]))
		var seqs []int
		for _, ev := range events {
			if ev.SessionID != s || ev.ReplyID != replyIDs[s] {
				t.Errorf("watcher of %s got %s of session %q reply %q", s, ev.Type, ev.SessionID, ev.ReplyID)
				continue
			}
			if ev.Type != bus.TypeCallProgress {
				continue
			}
			if ev.ToolCallID != "p1" || ev.Subject != "p1" || !strings.HasPrefix(ev.Source, "toolbus/router/") {
				t.Errorf("progress toolcallid %q subject %q source %q, want p1 from the router (1.18)", ev.ToolCallID, ev.Subject, ev.Source)
			}
			var p bus.Progress
			if err := json.Unmarshal(ev.Data, &p); err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, p.Seq)
			if want := fmt.Sprintf("%s step %d", s, p.Seq); len(p.Output) != 1 || p.Output[0].Text != want {
				t.Errorf("progress %d of %s: %s, want text %q", p.Seq, s, jsonOf(p.Output), want)
			}
		}
		if fmt.Sprint(seqs) != "[1 2]" {
			t.Errorf("%s saw progress seqs %v, want [1 2]", s, seqs)
		}
	}
}
