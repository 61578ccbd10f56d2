package facade

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// storeWatch turns writes to the deployment's KV buckets into listings:
// the record of a used session (activation, mode, rules: reset_tools,
// load_skill_through_path, session.activate, from any client), and for
// every session the tool definitions, the groups, workers arriving or
// leaving, and the skills object store. A bucket that does not exist yet
// (no router has started) is watched once it does; until then, and for
// what no watch sees, the sessions' Poll lists again.
type storeWatch struct {
	nc   *nats.Conn
	subj bus.Subjects
	// closing ends when the facade closes; loop runs a goroutine the
	// facade owns (life.Loop); changed marks the listings of a session
	// ("": every session) to compare with the bus.
	closing context.Context
	loop    func(func(context.Context)) bool
	changed func(id string)
	poll    time.Duration // a watch that failed to start is tried again
	log     *slog.Logger

	once     sync.Once
	listings atomic.Int64 // listings asked for, for the tests and measurements
}

// firstWatchWait bounds the wait for the first attempts of the watches
// (made at once); what is not started by then starts in the background.
const firstWatchWait = 5 * time.Second

func (w *storeWatch) count() { w.listings.Add(1) }

// start starts the deployment-wide watches, once. Each is a plain
// subscription to what a write publishes (a bucket's $KV subjects, the
// skills' metadata subjects), not a JetStream watch: the facade creates no
// consumer, whose deliver subject nats-server would check against nothing
// (docs/security.md). What a subscription misses (a reconnection), the
// sessions' Poll lists again.
func (w *storeWatch) start() {
	w.once.Do(func() {
		subj := w.subj
		// One subscription to every session's record, not one per
		// session: a write of a session nobody serves here is a map
		// lookup.
		sessions := "$KV." + subj.Bucket(bus.BucketSessions) + "."
		firsts := []<-chan struct{}{
			w.sub(sessions+">", func(m *nats.Msg) { w.changed(strings.TrimPrefix(m.Subject, sessions)) }),
			w.sub("$KV."+subj.Bucket(bus.BucketTools)+".>", func(*nats.Msg) { w.changed("") }),
			w.sub("$KV."+subj.Bucket(bus.BucketGroups)+".>", func(*nats.Msg) { w.changed("") }),
		}
		workers := map[string]bool{}
		firsts = append(firsts, w.sub("$KV."+subj.Bucket(bus.BucketWorkers)+".>", func(m *nats.Msg) {
			// A heartbeat rewrites a known key: nothing changes. A new key
			// (a worker arrived, or first seen here), a leave or a
			// deletion may change listings.
			gone := kvDeleted(m) || bus.DecodeWorkerBeat(m.Data).Left
			if gone == !workers[m.Subject] {
				return
			}
			if gone {
				delete(workers, m.Subject)
			} else {
				workers[m.Subject] = true
			}
			w.changed("")
		}))
		firsts = append(firsts, w.sub("$O."+subj.ObjectStore(bus.ObjectSkills)+".M.>", func(*nats.Msg) { w.changed("") }))
		t := time.NewTimer(firstWatchWait)
		defer t.Stop()
		for _, first := range firsts {
			select {
			case <-first:
			case <-t.C:
				return
			}
		}
	})
}

// sub subscribes to subject with apply until the facade closes; the
// channel closes when the first attempt to subscribe has ended. apply
// runs on one goroutine per subscription.
func (w *storeWatch) sub(subject string, apply func(*nats.Msg)) <-chan struct{} {
	return w.goRetry(func(ctx context.Context) (func(), error) {
		msgs := make(chan *nats.Msg, 1024)
		s, err := w.nc.ChanSubscribe(subject, msgs)
		if err != nil {
			return nil, err
		}
		if err := bus.Flush(ctx, w.nc); err != nil {
			_ = s.Unsubscribe()
			return nil, err
		}
		done := follow(ctx, msgs, apply)
		return func() { _ = s.Unsubscribe(); <-done }, nil
	})
}

// follow applies every update of a watch until ctx ends or the watch
// closes; done closes then.
func follow[T any](ctx context.Context, updates <-chan T, apply func(T)) (done chan struct{}) {
	done = make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case u, ok := <-updates:
				if !ok {
					return
				}
				apply(u)
			}
		}
	}()
	return done
}

// goRetry runs start in the background, again every Poll until it
// succeeds, and stops what it started when the facade closes. The
// channel closes when the first attempt has ended, for start to wait
// on: a change made once the session is served is then seen, while a
// login that may not watch (a stdio host on an agent's credentials:
// each attempt a request timeout) holds the first session up at most
// firstWatchWait.
func (w *storeWatch) goRetry(start func(context.Context) (func(), error)) <-chan struct{} {
	ctx := w.closing
	first := make(chan struct{})
	if !w.loop(func(context.Context) {
		stop, err := start(ctx)
		close(first)
		for {
			if err == nil {
				<-ctx.Done()
				stop()
				return
			}
			w.log.Debug("facade: watch not started yet", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(w.poll):
			}
			stop, err = start(ctx)
		}
	}) {
		close(first) // the facade is closing: nothing to start
	}
	return first
}
