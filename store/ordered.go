package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Ordered is a Cache of a bucket's definitions (tools, groups) behind a
// lock, listed in the order every router lists them: when each was first
// registered, then by key. It is fed by a watch (Apply) and by its
// writer's own puts (Put) and deletes (Delete). Safe for concurrent use.
type Ordered[V any] struct {
	kv    jetstream.KeyValue
	order func(V) int64
	// changed is called with the new listing after every change, under
	// the lock (it must not call back into the Ordered).
	changed func(list []V)

	mu    sync.RWMutex
	cache *Cache[V] // by key, with the tombstones of deleted keys
	list  []V       // replaced, never changed: readers keep what List gave
	keys  []string  // list's keys
}

// NewOrdered returns an empty Ordered over kv; order gives a value's
// registration time, changed (may be nil) is told each new listing.
func NewOrdered[V any](kv jetstream.KeyValue, order func(V) int64, changed func(list []V)) *Ordered[V] {
	if changed == nil {
		changed = func([]V) {}
	}
	return &Ordered[V]{kv: kv, order: order, changed: changed, cache: NewCache[V](0)}
}

// Apply applies one watch delivery (Cache.Apply) and returns decode's
// error, which changes nothing.
func (o *Ordered[V]) Apply(e jetstream.KeyValueEntry, decode func(val []byte) (v V, keep bool, err error)) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	old, had := o.cache.Get(e.Key())
	changed, err := o.cache.Apply(e, decode)
	if changed {
		o.relist(e.Key(), old, had)
	}
	return err
}

// Put caches v as key's value at revision rev, unless a newer revision of
// key, or its delete, is cached.
func (o *Ordered[V]) Put(key string, rev uint64, v V) {
	o.mu.Lock()
	defer o.mu.Unlock()
	old, had := o.cache.Get(key)
	if o.cache.Put(key, rev, v) {
		o.relist(key, old, had)
	}
}

// Delete deletes key from the bucket (Bounded) and from the cache.
func (o *Ordered[V]) Delete(ctx context.Context, key string) error {
	rev, err := Delete(ctx, o.kv, key, Bounded)
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old, had := o.cache.Get(key)
	if o.cache.DeleteOwn(key, rev) {
		o.relist(key, old, had)
	}
	return nil
}

// Get returns key's value.
func (o *Ordered[V]) Get(key string) (V, bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.cache.Get(key)
}

// List returns the values in registration order; the slice must not be
// modified.
func (o *Ordered[V]) List() []V {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.list
}

// Len returns the number of values held.
func (o *Ordered[V]) Len() int {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return len(o.list)
}

// relist moves key in a new listing, from old (when had) to its value now
// (none: out), and tells changed; the caller holds mu. Linear in the
// listing (two copies), not a sort of it: every new registration relists
// (session 35, docs/performance.md).
func (o *Ordered[V]) relist(key string, old V, had bool) {
	list, keys := slices.Clone(o.list), slices.Clone(o.keys)
	if had {
		if i, found := o.find(list, keys, key, old); found {
			list, keys = slices.Delete(list, i, i+1), slices.Delete(keys, i, i+1)
		}
	}
	if v, ok := o.cache.Get(key); ok {
		i, _ := o.find(list, keys, key, v)
		list, keys = slices.Insert(list, i, v), slices.Insert(keys, i, key)
	}
	o.list, o.keys = list, keys
	o.changed(list)
}

// find is where key, valued v, is or goes in list: by registration, then key.
func (o *Ordered[V]) find(list []V, keys []string, key string, v V) (int, bool) {
	at := o.order(v)
	i := sort.Search(len(list), func(i int) bool { return cmp.Or(cmp.Compare(o.order(list[i]), at), cmp.Compare(keys[i], key)) >= 0 })
	return i, i < len(list) && keys[i] == key
}
