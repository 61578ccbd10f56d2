package schemas

import (
	"container/list"
	"crypto/sha256"
	"sync"
	"sync/atomic"
)

// The compile cache: Compile keys every schema by the SHA-256 of its compact
// form and keeps the last results (compiled schemas and refusals alike), so
// the same schema (a request-scoped tool sent again in every batch, tools
// sharing a schema, a worker re-registering) is compiled once per process.
// A Schema is immutable, so one value is shared by every holder.
const (
	// CacheEntries bounds the schemas the cache keeps.
	CacheEntries = 512
	// CacheBytes bounds the compact bytes of the schemas it keeps (the
	// compiled form is a small multiple of them).
	CacheBytes = 8 << 20
)

type cacheKey [sha256.Size]byte

type cacheEntry struct {
	key  cacheKey
	s    *Schema
	err  error
	size int
}

type compileCache struct {
	mu      sync.Mutex
	ll      *list.List // front: most recent
	byKey   map[cacheKey]*list.Element
	bytes   int
	hits    atomic.Uint64
	misses  atomic.Uint64
	entries int
	maxB    int
}

var cache = newCompileCache(CacheEntries, CacheBytes)

func newCompileCache(entries, bytes int) *compileCache {
	return &compileCache{ll: list.New(), byKey: map[cacheKey]*list.Element{}, entries: entries, maxB: bytes}
}

func (c *compileCache) get(k cacheKey) (*Schema, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[k]
	if !ok {
		c.misses.Add(1)
		return nil, nil, false
	}
	c.hits.Add(1)
	c.ll.MoveToFront(el)
	e := el.Value.(*cacheEntry)
	return e.s, e.err, true
}

func (c *compileCache) put(k cacheKey, s *Schema, err error, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[k]; ok {
		c.ll.MoveToFront(el)
		return
	}
	if size > c.maxB {
		return
	}
	c.byKey[k] = c.ll.PushFront(&cacheEntry{key: k, s: s, err: err, size: size})
	c.bytes += size
	for c.ll.Len() > c.entries || c.bytes > c.maxB {
		el := c.ll.Back()
		e := el.Value.(*cacheEntry)
		c.ll.Remove(el)
		delete(c.byKey, e.key)
		c.bytes -= e.size
	}
}

// CacheStats reports the compile cache's hits and misses since the process
// started, and the schemas it holds now.
func CacheStats() (hits, misses uint64, held int) {
	cache.mu.Lock()
	held = cache.ll.Len()
	cache.mu.Unlock()
	return cache.hits.Load(), cache.misses.Load(), held
}
