package schemas

import (
	"crypto/sha256"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/golang-lru/v2/simplelru"
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
	s    *Schema
	err  error
	size int
}

// compileCache is an LRU bounded by entries (simplelru) and by bytes
// (evicting the oldest until the sum fits).
type compileCache struct {
	mu           sync.Mutex
	lru          *simplelru.LRU[cacheKey, cacheEntry]
	bytes, maxB  int
	hits, misses atomic.Uint64
}

var cache = newCompileCache(CacheEntries, CacheBytes)

func newCompileCache(entries, bytes int) *compileCache {
	c := &compileCache{maxB: bytes}
	c.lru, _ = simplelru.NewLRU(entries, func(_ cacheKey, e cacheEntry) { c.bytes -= e.size })
	return c
}

func (c *compileCache) get(k cacheKey) (*Schema, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Get(k)
	if !ok {
		c.misses.Add(1)
		return nil, nil, false
	}
	c.hits.Add(1)
	return e.s, e.err, true
}

func (c *compileCache) put(k cacheKey, s *Schema, err error, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.lru.Get(k); ok || size > c.maxB {
		return
	}
	c.lru.Add(k, cacheEntry{s: s, err: err, size: size})
	c.bytes += size
	for c.bytes > c.maxB {
		c.lru.RemoveOldest()
	}
}

// CacheStats reports the compile cache's hits and misses since the process
// started, and the schemas it holds now.
func CacheStats() (hits, misses uint64, held int) {
	cache.mu.Lock()
	held = cache.lru.Len()
	cache.mu.Unlock()
	return cache.hits.Load(), cache.misses.Load(), held
}
