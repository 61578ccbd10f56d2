package store

import (
	"iter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// prunePast is the number of tombstones past which those older than the
// Cache's keep are dropped.
const prunePast = 1024

type cacheItem[V any] struct {
	v   V
	rev uint64
}

type tombstone struct {
	rev uint64
	at  time.Time
}

// Cache is the one watch-fed cache of KV entries with tombstones
// (docs/protocol.md 8): it keeps each key's revision, and a taken-out key's
// tombstone, and refuses whatever is older. Not safe for concurrent use.
type Cache[V any] struct {
	vals map[string]cacheItem[V]
	dead map[string]tombstone
	keep time.Duration
	now  func() time.Time
}

// NewCache returns an empty Cache whose tombstones are kept for keep (zero: for
// as long as the Cache lives; fit for buckets whose keys are few, as tools
// and groups).
func NewCache[V any](keep time.Duration) *Cache[V] {
	return &Cache[V]{vals: map[string]cacheItem[V]{}, dead: map[string]tombstone{}, keep: keep, now: time.Now}
}

// Stale reports whether revision rev of key is no newer than what the Cache
// knows of key: the value it holds, or its tombstone.
func (m *Cache[V]) Stale(key string, rev uint64) bool {
	if t, ok := m.dead[key]; ok && rev <= t.rev {
		return true
	}
	it, ok := m.vals[key]
	return ok && rev <= it.rev
}

// Put stores v as key's value at revision rev (an equal one replaces it),
// unless the Cache holds a newer value or a tombstone at rev or later; it
// reports whether it stored.
func (m *Cache[V]) Put(key string, rev uint64, v V) bool {
	if t, ok := m.dead[key]; ok && rev <= t.rev {
		return false
	}
	if it, ok := m.vals[key]; ok && it.rev > rev {
		return false
	}
	delete(m.dead, key)
	m.vals[key] = cacheItem[V]{v: v, rev: rev}
	return true
}

// DeleteOwn takes key out after this process deleted it in KV at revision
// rev (0 when KV held nothing): the value held goes whatever its
// revision, as Delete at the larger of rev and the held revision.
func (m *Cache[V]) DeleteOwn(key string, rev uint64) bool { return m.Delete(key, max(rev, m.Rev(key))) }

// Delete takes key out as of revision rev, unless the Cache holds a newer
// value, and keeps rev as its tombstone; it reports whether a held value
// was dropped.
func (m *Cache[V]) Delete(key string, rev uint64) bool {
	it, held := m.vals[key]
	if held && it.rev > rev {
		return false
	}
	delete(m.vals, key)
	now := m.now()
	if t, ok := m.dead[key]; !ok || t.rev < rev {
		m.dead[key] = tombstone{rev: rev, at: now}
	}
	if m.keep > 0 && len(m.dead) > prunePast {
		for k, t := range m.dead {
			if now.Sub(t.at) > m.keep {
				delete(m.dead, k)
			}
		}
	}
	return held
}

// Get returns key's value.
func (m *Cache[V]) Get(key string) (V, bool) {
	it, ok := m.vals[key]
	return it.v, ok
}

// Rev returns the revision of key's value; zero when none is held.
func (m *Cache[V]) Rev(key string) uint64 { return m.vals[key].rev }

// Len returns the number of values held.
func (m *Cache[V]) Len() int { return len(m.vals) }

// All yields every key and value held, in no order.
func (m *Cache[V]) All() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		for k, it := range m.vals {
			if !yield(k, it.v) {
				return
			}
		}
	}
}

// Apply applies one watch delivery: a delete or purge takes the key out; a
// put is decoded, and stored when decode says keep, else taken out. It
// reports whether the Cache changed, and decode's error (no change).
func (m *Cache[V]) Apply(e jetstream.KeyValueEntry, decode func(val []byte) (v V, keep bool, err error)) (changed bool, err error) {
	key, rev := e.Key(), e.Revision()
	if e.Operation() != jetstream.KeyValuePut {
		return m.Delete(key, rev), nil
	}
	v, keep, err := decode(e.Value())
	if err != nil {
		return false, err
	}
	if !keep {
		return m.Delete(key, rev), nil
	}
	return m.Put(key, rev, v), nil
}

// Forget drops key's value and leaves no tombstone: whatever the Cache does
// not otherwise refuse may be stored again, at any revision.
func (m *Cache[V]) Forget(key string) { delete(m.vals, key) }
