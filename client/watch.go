package client

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// AllSessions is what a ListingWatch reports for a change that may touch
// every listing (a definition, group, worker or skill).
const AllSessions = ""

// ListingWatch tells its caller that a session's tool listing may have
// changed: a write to the session's record, or for every session
// (AllSessions) to definitions, groups, workers' arrivals and leaves, and
// skills. Plain subscriptions, so security.RoleFacade suffices; what it
// misses (a reconnection) the caller catches by listing on a timer too.
type ListingWatch struct {
	nc      *nats.Conn
	changed func(session string)

	mu      sync.RWMutex // held for reading while changed runs
	stopped bool
	subs    []*nats.Subscription

	wmu     sync.Mutex
	workers map[string]bool // the keys of live workers

	ctx  context.Context // ends with Stop
	stop context.CancelFunc
	done chan struct{} // the retrying goroutine has returned
}

// WatchListings calls changed with a session id, or AllSessions, for each
// write that may change a listing (changed must not block). It returns once
// the first attempt to subscribe ended; what failed is tried again every
// retry (zero means 2s) until Stop.
func WatchListings(ctx context.Context, c *Client, retry time.Duration, changed func(session string)) *ListingWatch {
	retry = cmp.Or(max(retry, 0), 2*time.Second)
	w := &ListingWatch{nc: c.nc, changed: changed, workers: map[string]bool{}, done: make(chan struct{})}
	w.ctx, w.stop = context.WithCancel(context.WithoutCancel(ctx))
	left := w.subscribe(ctx, listingSubjects(c.subj))
	go func() {
		defer close(w.done)
		t := time.NewTicker(retry)
		defer t.Stop()
		for len(left) > 0 {
			select {
			case <-w.ctx.Done():
				return
			case <-t.C:
				left = w.subscribe(w.ctx, left)
			}
		}
	}()
	return w
}

// Stop ends the watch, waiting for a call of changed in progress and the
// retrying, until ctx ends. It is safe to call twice.
func (w *ListingWatch) Stop(ctx context.Context) error {
	w.stop()
	w.mu.Lock()
	w.stopped = true
	subs := w.subs
	w.subs = nil
	w.mu.Unlock()
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ListingSubjects are the subjects a ListingWatch of a deployment with
// subjects s subscribes to: its login must be allowed to subscribe to
// them (security.RoleFacade is).
func ListingSubjects(s bus.Subjects) []string {
	var out []string
	for _, f := range listingSubjects(s) {
		out = append(out, f.subject)
	}
	return out
}

// listingFollow is one subject a ListingWatch follows, and which session
// a write on it concerns (false: none).
type listingFollow struct {
	subject string
	session func(w *ListingWatch, m *nats.Msg) (string, bool)
}

// listingSubjects are the subjects whose writes may change listings.
func listingSubjects(s bus.Subjects) []listingFollow {
	kv := func(b string) string { return "$KV." + s.Bucket(b) + "." }
	sessions := kv(bus.BucketSessions)
	workers := kv(bus.BucketWorkers)
	return []listingFollow{
		{sessions + ">", func(_ *ListingWatch, m *nats.Msg) (string, bool) {
			id := strings.TrimPrefix(m.Subject, sessions)
			if !bus.ValidID(id) || !(kvDeleted(m) || json.Valid(m.Data)) {
				return "", false
			}
			return id, true
		}},
		{kv(bus.BucketTools) + ">", allIfRecord},
		{kv(bus.BucketGroups) + ">", allIfRecord},
		{workers + ">", (*ListingWatch).workerChanged},
		{"$O." + s.ObjectStore(bus.ObjectSkills) + ".M.>", allIfRecord},
	}
}

// allIfRecord reports every session for a deletion or a JSON record; a
// non-JSON value changes no listing.
func allIfRecord(_ *ListingWatch, m *nats.Msg) (string, bool) {
	return AllSessions, kvDeleted(m) || json.Valid(m.Data)
}

// workerChanged reports every session when a worker arrives or leaves, not
// on a heartbeat.
func (w *ListingWatch) workerChanged(m *nats.Msg) (string, bool) {
	gone := kvDeleted(m) || bus.DecodeWorkerBeat(m.Data).Left
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if gone == !w.workers[m.Subject] {
		return "", false
	}
	if gone {
		delete(w.workers, m.Subject)
	} else {
		if len(w.workers) >= maxWorkerKeys {
			clear(w.workers) // keys of workers that expired without leaving: each live one arrives again
		}
		w.workers[m.Subject] = true
	}
	return AllSessions, true
}

// maxWorkerKeys bounds the live workers' keys a ListingWatch keeps.
const maxWorkerKeys = 1 << 16

// subscribe subscribes to follows and flushes once; it returns those it
// could not subscribe (all, if the flush failed).
func (w *ListingWatch) subscribe(ctx context.Context, follows []listingFollow) (left []listingFollow) {
	var made []*nats.Subscription
	for _, f := range follows {
		s, err := w.nc.Subscribe(f.subject, func(m *nats.Msg) {
			w.mu.RLock()
			defer w.mu.RUnlock()
			if w.stopped {
				return
			}
			if id, ok := f.session(w, m); ok {
				w.changed(id)
			}
		})
		if err != nil {
			left = append(left, f)
			continue
		}
		made = append(made, s)
	}
	if len(made) > 0 {
		if err := bus.Flush(ctx, w.nc); err != nil {
			for _, s := range made {
				_ = s.Unsubscribe()
			}
			return follows
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		for _, s := range made {
			_ = s.Unsubscribe()
		}
		return nil
	}
	w.subs = append(w.subs, made...)
	return left
}

// kvDeleted reports whether m, published on a KV key's subject, deletes or
// purges it.
func kvDeleted(m *nats.Msg) bool {
	op := m.Header.Get("KV-Operation")
	return op == "DEL" || op == "PURGE"
}
