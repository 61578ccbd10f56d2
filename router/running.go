package router

import (
	"sync"

	"github.com/toolbus/toolbus/parked"
)

// runningBatches are the batches running on this router, by session and
// reply id: what a cancel reaches (docs/protocol.md 3.5) and what a drain
// counts.
type runningBatches struct {
	mu sync.Mutex
	m  map[string]*batch // sessionid/replyid → running batch
}

// track makes a batch reachable by cancels; untrack forgets it.
func (rb *runningBatches) track(b *batch) {
	rb.mu.Lock()
	if rb.m == nil {
		rb.m = map[string]*batch{}
	}
	if b.key == "" {
		b.key = parked.BatchKey(b.session, b.replyID)
	}
	rb.m[b.key] = b
	rb.mu.Unlock()
}

func (rb *runningBatches) untrack(b *batch) {
	key := b.key
	rb.mu.Lock()
	if rb.m[key] == b {
		delete(rb.m, key)
	}
	rb.mu.Unlock()
}

// running returns the batch of key running here, or nil.
func (rb *runningBatches) running(key string) *batch {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return rb.m[key]
}

// callsInFlight counts the calls started here and not finished.
func (rb *runningBatches) callsInFlight() int {
	rb.mu.Lock()
	bs := make([]*batch, 0, len(rb.m))
	for _, b := range rb.m {
		bs = append(bs, b)
	}
	rb.mu.Unlock()
	n := 0
	for _, b := range bs {
		b.mu.Lock()
		for _, c := range b.calls {
			if c.result == nil && c.cancel != nil {
				n++
			}
		}
		b.mu.Unlock()
	}
	return n
}
