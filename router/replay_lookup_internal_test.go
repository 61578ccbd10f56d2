package router

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/testkit"
)

// lookupStream answers CONSUMER.INFO as a script says, one answer a try:
// "none" leaves the try unanswered, "leaderless" describes the consumer
// with a cluster and no leader, "led" with one, "single" as one server
// does (no cluster), "gone" is not found.
type lookupStream struct {
	jetstream.Stream
	script []string
	tries  atomic.Int32
}

type describedConsumer struct {
	jetstream.Consumer
	info *jetstream.ConsumerInfo
}

func (c describedConsumer) CachedInfo() *jetstream.ConsumerInfo { return c.info }

func (s *lookupStream) Consumer(ctx context.Context, name string) (jetstream.Consumer, error) {
	n := int(s.tries.Add(1)) - 1
	answer := s.script[min(n, len(s.script)-1)]
	info := &jetstream.ConsumerInfo{Name: name}
	switch answer {
	case "none":
		<-ctx.Done()
		return nil, ctx.Err()
	case "gone":
		return nil, jetstream.ErrConsumerNotFound
	case "leaderless":
		info.Cluster = &jetstream.ClusterInfo{Name: "c"}
	case "led":
		info.Cluster = &jetstream.ClusterInfo{Name: "c", Leader: "n1"}
	}
	return describedConsumer{info: info}, nil
}

// TestLookup: a consumer lookup no server answers is tried again after
// lookupTry, one that names no leader again after leaderPause (at most
// lookupTry), within lookupAll in all (docs/protocol.md 3.4, 1.9), so a
// relayed pull goes to a consumer with a leader or the follower is refused.
func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script []string
		err    error
		tries  int32
		took   time.Duration
	}{
		{"single server", []string{"single"}, nil, 1, 0},
		{"led", []string{"led"}, nil, 1, 0},
		{"unanswered, then led", []string{"none", "led"}, nil, 2, lookupTry},
		{"unanswered, leaderless, then led", []string{"none", "leaderless", "leaderless", "led"}, nil, 4, lookupTry + 2*leaderPause},
		{"leaderless", []string{"leaderless"}, errLeaderless, int32(lookupTry/leaderPause) + 1, lookupTry},
		{"gone", []string{"gone"}, jetstream.ErrConsumerNotFound, 1, 0},
		{"never answered", []string{"none"}, context.DeadlineExceeded, int32(lookupAll / lookupTry), lookupAll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &lookupStream{script: tc.script}
				start := time.Now()
				c, err := lookup(context.Background(), s, "replay-x")
				took := time.Since(start)
				if !errors.Is(err, tc.err) || (err == nil) != (c != nil) {
					t.Fatalf("lookup = %v %v, want %v", c, err, tc.err)
				}
				// At lookupAll the last try's deadline and the lookup's fall
				// on the same instant: either may be seen first, and a try
				// more may start and end at once.
				if n := s.tries.Load(); n < tc.tries || n > tc.tries+1 || n > tc.tries && tc.err != context.DeadlineExceeded || took != tc.took {
					t.Fatalf("%d tries in %v, want %d in %v", s.tries.Load(), took, tc.tries, tc.took)
				}
			})
		})
	}
}

// TestHeardListens: before a consumer's first relayed pull a router waits
// until its server knows the pull subject (a probe answered by anyone but
// nats-server's 503 "no responders"), at most listenWait; it remembers a
// subject it heard (docs/protocol.md 3.4, 1.9).
func TestHeardListens(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	var probes atomic.Int32
	answer := func(subject string) *nats.Subscription {
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
			probes.Add(1)
			if string(m.Data) != string(probePull) {
				t.Errorf("probe %s", m.Data)
			}
			_ = m.RespondMsg(&nats.Msg{Header: nats.Header{"Status": {"400"}, "Description": {"Bad Request - heartbeat value too large"}}})
		})
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	var h heard

	answer("next.a")
	if !h.listens(t.Context(), nc, "next.a") || !h.listens(t.Context(), nc, "next.a") || probes.Load() != 1 {
		t.Fatalf("a listening subject: %d probes, want 1 (then remembered)", probes.Load())
	}

	start := time.Now()
	if h.listens(t.Context(), nc, "next.nobody") {
		t.Fatal("a subject nobody listens to was heard")
	}
	if took := time.Since(start); took < listenWait {
		t.Fatalf("gave up after %v, want %v", took, listenWait)
	}

	// Interest that comes while the router waits is found.
	done := make(chan bool)
	go func() { done <- h.listens(t.Context(), nc, "next.late") }()
	answer("next.late")
	if !<-done {
		t.Fatal("a subject that came to be heard was not")
	}

	// A subject that has interest but no answer is relayed to: the
	// follower's heartbeats tell.
	if _, err := nc.Subscribe("next.silent", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if !h.listens(t.Context(), nc, "next.silent") {
		t.Fatal("an unanswered probe refused the relay")
	}
}
