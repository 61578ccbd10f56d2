package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestRelayedPullRaceOnCluster is an experiment, run only with
// TOOLBUS_RELAY_RACE=1: on a 3-node cluster it makes an R3 consumer
// (connection on node 0, as a router), relays a pull from node 1 (as
// another router) with a reply subject a follower on node 2 subscribed to,
// and counts the pulls after which nothing at all came (no message, no
// status) although the stream holds a message; a probe right after (a bad
// request on the same connection, answered 400) shows whether the pull
// subject had interest on node 1. Measured under a load of 12 (session 13):
// with the follower's subscription made just before the pull (the 1.8
// follower made one per pull), 11 of 300 pulls were silent, 10 with the
// probe answered (JetStream dropped the waiting pull because the follower's
// interest had not reached the consumer leader yet; nothing was consumed)
// and 1 "no responders" (node 1 did not know the pull subject yet); with
// the subscription made before the consumer (the 1.9 follower, one per
// consumer), 4 of 300, all "no responders"; relayed only once a probe was
// answered as well (the 1.9 router), 0 of 300.
func TestRelayedPullRaceOnCluster(t *testing.T) {
	if os.Getenv("TOOLBUS_RELAY_RACE") == "" {
		t.Skip("an experiment: set TOOLBUS_RELAY_RACE=1")
	}
	c := testkit.RunCluster(t)
	if err := c.WaitReady(testkit.Within(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	a, b, f := testkit.ConnectURL(t, c.URL(0)), testkit.ConnectURL(t, c.URL(1)), testkit.ConnectURL(t, c.URL(2))
	js := testkit.JetStream(t, a)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RACE", Subjects: []string{"race.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "race.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	const n = 300
	probe := []byte(`{"batch":1,"expires":1000,"idle_heartbeat":1000000}`) // refused 400, nothing taken
	for _, v := range []struct{ early, first bool }{{false, false}, {true, false}, {true, true}} {
		early := v.early
		silent, probes := 0, map[string]int{}
		for i := range n {
			name := fmt.Sprintf("c%v%v%d", early, v.first, i)
			subscribe := func() (string, *nats.Subscription) {
				inbox := f.NewInbox()
				sub, err := f.SubscribeSync(inbox)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.Flush(); err != nil {
					t.Fatal(err)
				}
				return inbox, sub
			}
			var (
				inbox string
				sub   *nats.Subscription
			)
			if early {
				inbox, sub = subscribe()
			}
			mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := st.CreateConsumer(mctx, jetstream.ConsumerConfig{Name: name, AckPolicy: jetstream.AckNonePolicy, Replicas: 3, InactiveThreshold: 10 * time.Second})
			cancel()
			if err != nil {
				t.Fatalf("consumer %d: %v", i, err)
			}
			if !early {
				inbox, sub = subscribe()
			}
			next := "$JS.API.CONSUMER.MSG.NEXT.RACE." + name
			for end := time.Now().Add(2 * time.Second); v.first && time.Now().Before(end); {
				// As a router of 1.9 does before a consumer's first relay.
				if _, err := b.Request(next, probe, bound); !errors.Is(err, nats.ErrNoResponders) {
					break
				}
			}
			if err := b.PublishMsg(&nats.Msg{Subject: next, Reply: inbox, Data: []byte(`{"batch":1,"expires":1000000000}`)}); err != nil {
				t.Fatal(err)
			}
			resp, err := b.Request(next, probe, bound)
			if err == nil {
				probes[resp.Header.Get("Status")]++
			} else {
				probes[err.Error()]++
			}
			if _, err := sub.NextMsg(3 * time.Second); err != nil {
				silent++
			}
			_ = sub.Unsubscribe()
		}
		t.Logf("subscribed before the consumer was made: %v, relayed once the pull subject answered: %v; silent pulls %d of %d; probes after the relay %v", early, v.first, silent, n, probes)
	}
}
