package offload

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

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

// SetAckWait gives o's publishes an acknowledgement wait of d, for the window's attack test.
func SetAckWait(o *Offloader, d time.Duration) {
	o.js, _ = jetstream.New(o.nc, jetstream.WithPublishAsyncTimeout(d))
}
