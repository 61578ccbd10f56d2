package worker_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// busyCount is an Observer that also counts busy answers.
type busyCount struct {
	rejects
	mu sync.Mutex
	n  int
}

func (b *busyCount) Busy(string) {
	b.mu.Lock()
	b.n++
	b.mu.Unlock()
}

// TestBurstAnsweredNotDropped: a burst far past the worker's slots and its
// waiting limit is never dropped by the NATS client as a slow consumer:
// one call runs, 1024 wait for the slot, and the rest are answered busy at
// once and counted; once the slot frees, every waiting call is answered
// (issue 26, item 9: slow-consumer drops on an exec subject).
func TestBurstAnsweredNotDropped(t *testing.T) {
	const burst = 1500
	f := newFixture(t, true)
	g := newGate()
	g.entered = make(chan string, burst)
	obs := &busyCount{rejects: rejects{n: map[string]int{}}}
	f.startWorker(worker.Config{MaxConcurrent: 1, Observer: obs}, func(w *worker.Worker) { raw(t, w, "slow", g.handler) })
	var (
		mu    sync.Mutex
		kinds = map[string]int{}
		all   = make(chan struct{})
		got   int
	)
	sub, err := f.nc.Subscribe("_INBOX.burst.>", func(m *nats.Msg) {
		e, err := bus.Decode(m)
		kind := "undecodable"
		if err == nil {
			kind = e.Type
			if e.Type == bus.TypeError {
				var be bus.Error
				_ = e.DataAs(&be)
				kind = be.Code
			}
		}
		mu.Lock()
		defer mu.Unlock()
		kinds[kind]++
		if got++; got == burst {
			close(all)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	for i := range burst {
		m := eventMsg(t, f.subj.Workers.Exec("slow"), execEvent(t, "slow", "c"+strconv.Itoa(i), `{}`))
		m.Reply = "_INBOX.burst." + strconv.Itoa(i)
		if err := f.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	// The busy answers come at once, while the first call still holds the slot.
	want := burst - 1 - 1024
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if kinds[bus.CodeBusy] != want {
			return fmt.Errorf("answers so far %v, want %d busy", kinds, want)
		}
		return nil
	})
	close(g.release)
	select {
	case <-all:
	case <-time.After(4 * bound):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("answers %v of %d", kinds, burst)
	}
	mu.Lock()
	defer mu.Unlock()
	if kinds[bus.TypeExecResult] != burst-want || kinds[bus.CodeBusy] != want || len(kinds) != 2 {
		t.Fatalf("answers %v", kinds)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.n != want {
		t.Fatalf("%d busy answers counted, want %d", obs.n, want)
	}
}
