package router

// SetMaxQueuedBytes sets the bound on the bytes of the messages waiting for
// a slot for the test, restoring it at its end.
func SetMaxQueuedBytes(t interface{ Cleanup(func()) }, n int64) {
	was := maxQueuedBytes
	maxQueuedBytes = n
	t.Cleanup(func() { maxQueuedBytes = was })
}
