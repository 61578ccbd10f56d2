package facade

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
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

// start starts the deployment-wide watches, once.
func (w *storeWatch) start() {
	w.once.Do(func() {
		subj := w.subj
		// One watch of every session's record (new writes only), not one
		// per session: the facade's cost stays one consumer however many
		// sessions come and go; a write of a session nobody serves here
		// is a map lookup.
		var firsts []<-chan struct{}
		firsts = append(firsts, w.goRetry(func(ctx context.Context) (func(), error) {
			return w.updates(ctx, subj.Bucket(bus.BucketSessions), func(e jetstream.KeyValueEntry) { w.changed(e.Key()) })
		}))
		firsts = append(firsts, w.kv(subj.Bucket(bus.BucketTools), ">", func(jetstream.KeyValueEntry) { w.changed("") }))
		firsts = append(firsts, w.kv(subj.Bucket(bus.BucketGroups), ">", func(jetstream.KeyValueEntry) { w.changed("") }))
		workers := map[string]bool{}
		firsts = append(firsts, w.kv(subj.Bucket(bus.BucketWorkers), ">", func(e jetstream.KeyValueEntry) {
			// A heartbeat rewrites a known key: nothing changes. A new key
			// (a worker arrived), a leave or a deletion may change listings.
			var v struct {
				Left bool `json:"left"`
			}
			_ = json.Unmarshal(e.Value(), &v)
			gone := e.Operation() != jetstream.KeyValuePut || v.Left
			if gone == !workers[e.Key()] {
				return
			}
			if gone {
				delete(workers, e.Key())
			} else {
				workers[e.Key()] = true
			}
			w.changed("")
		}))
		firsts = append(firsts, w.goRetry(func(ctx context.Context) (func(), error) {
			js, err := jetstream.New(w.nc)
			if err != nil {
				return nil, err
			}
			obs, err := js.ObjectStore(ctx, subj.ObjectStore(bus.ObjectSkills))
			if err != nil {
				return nil, err
			}
			ow, err := obs.Watch(ctx, jetstream.UpdatesOnly())
			if err != nil {
				return nil, err
			}
			done := follow(ctx, ow.Updates(), func(info *jetstream.ObjectInfo) {
				if info != nil {
					w.changed("")
				}
			})
			return func() { _ = ow.Stop(); <-done }, nil
		}))
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

// kv watches keys of bucket with apply until the facade closes; the
// channel closes when the first attempt to start it has ended.
func (w *storeWatch) kv(bucket, keys string, apply func(jetstream.KeyValueEntry)) <-chan struct{} {
	return w.goRetry(func(ctx context.Context) (func(), error) {
		js, err := jetstream.New(w.nc)
		if err != nil {
			return nil, err
		}
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			return nil, err
		}
		kw, err := store.WatchKV(ctx, kv, keys, apply)
		if err != nil {
			return nil, err
		}
		return kw.Stop, nil
	})
}

// updates watches the new writes to every key of bucket with apply; it
// returns a function that stops the watch.
func (w *storeWatch) updates(ctx context.Context, bucket string, apply func(jetstream.KeyValueEntry)) (func(), error) {
	js, err := jetstream.New(w.nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	kw, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return nil, err
	}
	done := follow(ctx, kw.Updates(), func(e jetstream.KeyValueEntry) {
		if e != nil {
			apply(e)
		}
	})
	return func() { _ = kw.Stop(); <-done }, nil
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
