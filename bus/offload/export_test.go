package offload

// MetaSubject is metaSubject, for the tests that forge metadata.
var MetaSubject = metaSubject

// HeadTail is headTail, for TestHeadTail.
var HeadTail = headTail

// SetPutWindow gives o a window of n bytes (whole chunks, at least one),
// for BenchmarkPut's sweep and the window's tests.
func SetPutWindow(o *Offloader, n int) { o.room = make(chan struct{}, max(n/ChunkSize, 1)) }

// Room is how many chunks o counts in its window now.
func Room(o *Offloader) int { return len(o.room) }

// Unacknowledged is how many of o's publishes nats.go holds unacknowledged.
func Unacknowledged(o *Offloader) int { return o.js.PublishAsyncPending() }
