package schemas

// CacheStats reports the compile cache's hits and misses since the process
// started, and the schemas it holds now.
func CacheStats() (hits, misses uint64, held int) {
	cache.mu.Lock()
	held = cache.ll.Len()
	cache.mu.Unlock()
	return cache.hits.Load(), cache.misses.Load(), held
}
