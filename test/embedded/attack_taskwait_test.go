package embedded

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/tasks"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackTaskWaitFlood (red team, session 17): an agent with one
// background task of its own sends many task waits at once, each asking
// for the longest wait (120 s). Every wait held one of the router's
// MaxInflight slots and one JetStream consumer (its KV watch of P_tasks)
// for the whole wait, with no bound per session: the waits filled every
// slot, and then every message that waits for a slot in the subscription's
// callback (another session's task verbs, answers, cancels, workers'
// registrations) waited behind them. Past tasks.MaxSessionWaits a session's
// wait is refused limit_exceeded at once, and the router serves others.
func TestAttackTaskWaitFlood(t *testing.T) {
	const slots = tasks.MaxSessionWaits + 8
	e := startEnv(t, 1, false, router.Config{MaxInflight: slots})
	g := newGate(t)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "slow_flood", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 200, Background: true}, gated(g, nil))
	})
	e.waitLive("slow_flood")
	const attacker = "flood-a"
	id := backgrounded(t, e.call(t, attacker, []bus.Call{{ID: "c1", Name: "slow_flood"}}).Results[0])

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const waits = slots + 16
	errs := make(chan error, waits)
	for range waits {
		go func() {
			_, err := e.client.Tasks().Wait(ctx, attacker, bus.MaxTaskWaitMS*time.Millisecond, id)
			errs <- err
		}()
	}
	refused := 0
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for refused < waits-tasks.MaxSessionWaits {
		select {
		case err := <-errs:
			if !errors.Is(err, &bus.Error{Code: bus.CodeLimitExceeded}) {
				t.Fatalf("a wait past the session's bound: want limit_exceeded, got %v", err)
			}
			refused++
		case <-timer.C:
			t.Fatalf("after %s, %d of %d waits of one session were refused: the router holds them all (%d consumers on the tasks bucket)",
				bound, refused, waits, e.consumersOf(t, "KV_"+bus.NewSubjects("").Bucket(tasks.BucketName)))
		}
	}
	// Another session's verb is served meanwhile.
	lctx, lcancel := context.WithTimeout(t.Context(), bound)
	defer lcancel()
	if _, err := e.client.Tasks().List(lctx, "flood-b"); err != nil {
		t.Fatalf("another session's task list while one session floods waits: %v", err)
	}
	if n := e.consumersOf(t, "KV_"+bus.NewSubjects("").Bucket(tasks.BucketName)); n > tasks.MaxSessionWaits+2 { // +2: the router's own listings of running tasks
		t.Fatalf("%d consumers on the tasks bucket for one session's waits; at most %d", n, tasks.MaxSessionWaits)
	}
	g.open()
	for range tasks.MaxSessionWaits { // the waits that were taken answer once the task ends
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("a wait within the bound: %v", err)
			}
		case <-time.After(bound):
			t.Fatal("a wait within the bound did not answer once its task ended")
		}
	}
}

// TestAttackTaskOutputConsumers (red team, session 17): each task output
// verb read the session's events through an ordered consumer on P_EVENTS
// that it never deleted; nats.go gives such a consumer 5 minutes of
// inactivity before the server removes it. An agent with any task of its
// session (kept 24 h after its end) could leave hundreds of consumers on
// the events stream with cheap requests, and a router refuses every
// replay once the stream holds 768 (unbound sessions) or 1,024 consumers:
// every session's replay refused for 5 minutes. The facade's tasks/get
// reads a task's output every 2 s, so its polling alone piled them up.
// Output deletes its consumer once it has read.
func TestAttackTaskOutputConsumers(t *testing.T) {
	e := newEnv(t, 1)
	g := newGate(t)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "slow_output", ReadOnly: true, ConcurrencySafe: true, TimeoutMS: 200, Background: true}, gated(g, nil))
	})
	e.waitLive("slow_output")
	const session = "output-a"
	id := backgrounded(t, e.call(t, session, []bus.Call{{ID: "c1", Name: "slow_output"}}).Results[0])
	events := bus.NewSubjects("").Stream(bus.StreamEvents)
	before := e.consumersOf(t, events)
	const reads = 16
	for range reads {
		if _, _, err := e.client.Tasks().Output(testCtx(t), session, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.consumersOf(t, events); n > before {
		t.Fatalf("%d task output reads left %d consumers on %s (each lives 5 minutes idle; replays are refused past 768)", reads, n-before, events)
	}
}
