package parked

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// callCache is the watch-fed cache of the call records in status parked
// and in status answered (whose lease another router may take over), with
// this router's own writes noted. Safe for concurrent use.
type callCache struct {
	src jetstream.KeyValue // P_parked, watched on keys *.*.*
	log *slog.Logger

	mu       sync.RWMutex
	parked   *store.Cache[*Record] // key → record, only records in bus.ParkParked; a tombstone per key that left, kept goneMemory
	answered map[string]*Record    // records in bus.ParkAnswered, for lease takeovers
	watch    *store.Watch
}

func newCallCache(kv jetstream.KeyValue, log *slog.Logger) *callCache {
	return &callCache{src: kv, log: log, parked: store.NewCache[*Record](goneMemory), answered: map[string]*Record{}}
}

func (c *callCache) start(ctx context.Context) (err error) {
	c.watch, err = watch(ctx, c.src, "*.*.*", c.apply)
	return err
}

// goneMemory is how long the tombstone of a record that left the parked
// status is kept, so that a late delivery of an older revision cannot list
// it as parked again.
const goneMemory = time.Minute

func (c *callCache) apply(e jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := e.Key()
	if c.parked.Stale(key, e.Revision()) {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		c.parked.Delete(key, e.Revision())
		delete(c.answered, key)
		return
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		c.log.Warn("parked: ignoring bad parked record", "key", key)
		return
	}
	r.Rev = e.Revision()
	if old, ok := c.answered[key]; !ok || old.Rev < r.Rev {
		if r.Status == bus.ParkAnswered {
			c.answered[key] = &r
		} else {
			delete(c.answered, key)
		}
	}
	if r.Status == bus.ParkParked {
		c.parked.Put(key, r.Rev, &r)
	} else {
		c.parked.Delete(key, r.Rev)
	}
}

// note caches a copy of r, which this router just wrote at r.Rev (callers
// change theirs).
func (c *callCache) note(key string, r *Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Status == bus.ParkParked {
		c.parked.Put(key, r.Rev, new(*r))
	} else {
		c.parked.Delete(key, r.Rev)
	}
}

func (c *callCache) list(session, replyID string) []*Record {
	out := c.where(func(r *Record) bool {
		return (session == "" || r.Session == session) && (replyID == "" || r.ReplyID == replyID)
	})
	slices.SortFunc(out, func(a, b *Record) int { return a.Created.Compare(b.Created) })
	return out
}

func (c *callCache) expired(now time.Time) []*Record {
	return c.where(func(r *Record) bool { return now.After(r.Expires) })
}

func (c *callCache) where(keep func(*Record) bool) []*Record {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []*Record
	for _, r := range c.parked.All() {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// answeredBefore returns the keys of the answered calls whose lease was
// last renewed before cutoff.
func (c *callCache) answeredBefore(cutoff time.Time) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var stale []string
	for key, r := range c.answered {
		if r.Touched.Before(cutoff) {
			stale = append(stale, key)
		}
	}
	return stale
}

// callKey and batchKey are the two kinds of P_parked key whose leases a
// router renews (an answered call, a continuation), so nothing tells them
// apart by counting dots.
type (
	callKey  string
	batchKey string
)

// leaseSet is the set of keys whose lease this router renews.
type leaseSet[K ~string] struct {
	mu   sync.Mutex
	keys map[K]struct{}
}

func newLeaseSet[K ~string]() leaseSet[K] { return leaseSet[K]{keys: map[K]struct{}{}} }

func (l *leaseSet[K]) hold(k K) {
	l.mu.Lock()
	l.keys[k] = struct{}{}
	l.mu.Unlock()
}

func (l *leaseSet[K]) release(k K) {
	l.mu.Lock()
	delete(l.keys, k)
	l.mu.Unlock()
}

func (l *leaseSet[K]) holds(k K) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.keys[k]
	return ok
}

func (l *leaseSet[K]) held() []K {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Collect(maps.Keys(l.keys))
}

// renew runs touch on every key held and lets go of those that moved on
// (errNotOwner, or gone); it returns the last other error.
func (l *leaseSet[K]) renew(touch func(key string) error) (failed error) {
	for _, key := range l.held() {
		switch err := touch(string(key)); {
		case err == nil:
		case errors.Is(err, errNotOwner), store.IsNotFound(err):
			l.release(key)
		default:
			failed = err
		}
	}
	return failed
}

// renewOwned renews, with compare-and-set, the lease of every record of l
// that this router still owns (touch renews it and reports whether it does).
func renewOwned[T any, K ~string](ctx context.Context, kv jetstream.KeyValue, l *leaseSet[K], p store.Policy, touch func(*T) bool) error {
	return l.renew(func(key string) error {
		_, _, err := cas(ctx, kv, key, p, errNotOwner, func(v *T) error {
			if !touch(v) {
				return errNotOwner
			}
			return nil
		})
		return err
	})
}

var errNotOwner = errors.New("parked: not the owner")
