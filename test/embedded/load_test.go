package embedded

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestLoadSharing: two routers and three workers serving the same tool share
// many concurrent calls; every call succeeds, every worker serves some, and
// both routers run some batches.
func TestLoadSharing(t *testing.T) {
	const (
		workers  = 3
		sessions = 24
		perBatch = 10
	)
	e := startEnvBeat(t, 2, onCluster(t), router.Config{}, calmHeartbeat)
	served := map[string]*atomic.Int64{}
	for range workers {
		e.addWorker(func(w *worker.Worker) {
			n := new(atomic.Int64)
			served[w.ID()] = n
			handle(t, w, bus.ToolDef{Name: "work", Description: "Do some work.", ConcurrencySafe: true},
				func(context.Context, *worker.Call) (*bus.ExecResult, error) {
					n.Add(1)
					return textResult(w.ID()), nil
				})
		})
	}
	e.waitLive("work")
	err := e.d.EveryStatus(t.Context(), func(st bus.Status) error {
		if ts, _ := toolStatus(st, "work"); ts.LiveWorkers != workers {
			return fmt.Errorf("router %s sees %d live workers for work, want %d", st.Router, ts.LiveWorkers, workers)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	ev := e.watch(t, "*")
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	replyIDs := make([]string, sessions)
	for i := range sessions {
		replyIDs[i] = client.NewReplyID()
		wg.Add(1)
		go func() {
			defer wg.Done()
			calls := make([]bus.Call, perBatch)
			for j := range calls {
				calls[j] = bus.Call{ID: fmt.Sprintf("c%d", j), Name: "work"}
			}
			reply, err := e.client.Call(ctx, fmt.Sprintf("load-%d", i), bus.Batch{Calls: calls}, client.WithReplyID(replyIDs[i]))
			if err != nil {
				errs <- err
				return
			}
			if len(reply.Results) != perBatch {
				errs <- fmt.Errorf("batch %d: %d results", i, len(reply.Results))
				return
			}
			for j, r := range reply.Results {
				if r.ID != calls[j].ID || r.State != bus.StateSuccess || served[textOf(r)] == nil {
					errs <- fmt.Errorf("batch %d call %d: %s", i, j, jsonOf(r))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	var total int64
	for id, n := range served {
		t.Logf("worker %s served %d calls", id, n.Load())
		if n.Load() == 0 {
			t.Errorf("worker %s served no call", id)
		}
		total += n.Load()
	}
	if total != sessions*perBatch {
		t.Errorf("workers served %d calls, want %d (each exactly once)", total, sessions*perBatch)
	}

	// Which router ran each batch: the source of its batch.done.
	pending := map[string]bool{}
	for _, id := range replyIDs {
		pending[id] = true
	}
	byRouter := map[string]int{}
	timeout := time.After(bound)
	for len(pending) > 0 {
		select {
		case x := <-ev.C:
			if x.Type == bus.TypeBatchDone && pending[x.ReplyID] {
				delete(pending, x.ReplyID)
				byRouter[strings.TrimPrefix(x.Source, "toolbus/router/")]++
			}
		case <-timeout:
			t.Fatalf("%d batch.done events missing", len(pending))
		}
	}
	t.Logf("batches per router: %v", byRouter)
	for _, r := range e.routers {
		if byRouter[r.ID()] == 0 {
			t.Errorf("router %s ran no batch: %v", r.ID(), byRouter)
		}
	}
}
