package embedded

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/router"
)

// TestAttackReplayPullFlood (session 26, red team): one session sends
// pulls (io.toolbus.consumer.next, which the sessions' shares do not count)
// by the thousand, for a consumer that does not exist and for one it made,
// with the longest wait; meanwhile another session's tools queries and
// replay are answered within bound, and once the flood is answered the
// router holds nothing of it but its pool's idle workers. Before the bound on a
// session's pulls being checked (each a JetStream API request), 3000 such
// pulls had another session wait 9.6 s for a tools query and 7.3 s
// for a replay (-race, beside a CPU burner); with it 0.5 s and 0.02 s.
func TestAttackReplayPullFlood(t *testing.T) {
	const flood = 3000
	e := startEnv(t, 1, false, router.Config{})
	const hog, other = "pull-hog", "pull-other"
	if _, err := e.client.Tools(t.Context(), other, "", nil); err != nil {
		t.Fatal(err)
	}
	// A consumer of its own, made through the router, to pull from.
	ready := e.request(t, eventMsg(t, bus.NewSubjects("").Replay(hog), newEvent(t, bus.TypeReplay, bus.Replay{})))
	var made bus.ReplayReady
	if err := ready.DataAs(&made); err != nil || made.Consumer == "" {
		t.Fatalf("replay consumer: %s %v", ready.Data, err)
	}
	before := runtime.NumGoroutine()

	inbox := nats.NewInbox()
	answers, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer answers.Unsubscribe()
	if err := answers.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	subject := bus.NewSubjects("").Replay(hog)
	began := time.Now()
	for i := range flood {
		name := bus.NewConsumerName("replay") // none such
		if i%2 == 0 {
			name = made.Consumer
		}
		m := eventMsg(t, subject, newEvent(t, bus.TypeConsumerNext, bus.ConsumerNext{Consumer: name, Batch: bus.MaxConsumerBatch,
			ExpiresMS: bus.MaxConsumerWaitMS, HeartbeatMS: bus.MaxConsumerWaitMS / 2}))
		m.Reply = inbox
		if err := e.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	// Another session's queries meanwhile.
	var slowest time.Duration
	for range 5 {
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		start := time.Now()
		_, err := e.client.Tools(ctx, other, "", nil)
		cancel()
		if err != nil {
			t.Fatalf("another session's tools query during the flood: %v", err)
		}
		slowest = max(slowest, time.Since(start))
	}
	// Another session's replay meanwhile.
	start := time.Now()
	otherReady := e.request(t, eventMsg(t, bus.NewSubjects("").Replay(other), newEvent(t, bus.TypeReplay, bus.Replay{})))
	if otherReady.Type != bus.TypeReplayReady {
		t.Fatalf("another session's replay during the flood: %s %s", otherReady.Type, otherReady.Data)
	}
	otherReplay := time.Since(start)
	if slowest > 3*time.Second || otherReplay > 3*time.Second {
		t.Fatalf("during one session's flood of pulls another session's tools query took %v, its replay %v", slowest, otherReplay)
	}
	// Every pull of the missing consumer is refused (bad_request); the
	// others wait at JetStream, not at the router.
	refused := 0
	for refused < flood/2 {
		m, err := answers.NextMsg(bound)
		if err != nil {
			t.Fatalf("%d of %d pulls of a missing consumer refused: %v", refused, flood/2, err)
		}
		if m.Header.Get("Status") == "" && len(m.Data) > 0 {
			refused++
		}
	}
	t.Logf("%d pulls from one session answered in %v; another session's slowest tools query meanwhile %v, its replay %v", flood, time.Since(began), slowest, otherReplay)
	t.Logf("goroutines: %d before the flood, %d after (the pool's idle workers stay a minute)", before, runtime.NumGoroutine())
}
