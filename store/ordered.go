package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
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
	list  []V
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
	changed, err := o.cache.Apply(e, decode)
	if changed {
		o.relist()
	}
	return err
}

// Put caches v as key's value at revision rev, unless a newer revision of
// key, or its delete, is cached.
func (o *Ordered[V]) Put(key string, rev uint64, v V) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cache.Put(key, rev, v) {
		o.relist()
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
	if o.cache.DeleteOwn(key, rev) {
		o.relist()
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

// relist rebuilds the listing and tells changed; the caller holds mu.
func (o *Ordered[V]) relist() {
	type keyed struct {
		key string
		v   V
	}
	all := make([]keyed, 0, o.cache.Len())
	for k, v := range o.cache.All() {
		all = append(all, keyed{k, v})
	}
	slices.SortFunc(all, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(o.order(a.v), o.order(b.v)), cmp.Compare(a.key, b.key))
	})
	list := make([]V, len(all))
	for i, x := range all {
		list[i] = x.v
	}
	o.list = list
	o.changed(list)
}
