package router

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/parked"
)

// canceller takes cancels on P.cancel.<session> (docs/protocol.md 3.5):
// every router gets each one and ends what it runs of the batch.
type canceller struct {
	*wire
	running    func(key string) *batch
	confirming *confirmed
	parked     func(session, replyID string, ids []string) // cancels the batch's parked and queued calls
}

// onCancel ends the named calls of a batch running on this router: running
// calls have their exec request abandoned (the worker cancels their context
// from the same event), and calls not yet started never start. A malformed
// cancel is answered with io.toolbus.error by every router (the sender
// reads the first).
func (r *canceller) onCancel(m *nats.Msg) {
	e, err := r.decode(m, "cancel", bus.TypeCallCancel)
	if err == nil && e.ReplyID == "" {
		err = bus.Errorf(bus.CodeBadEvent, "a cancel needs the replyid of the batch")
	}
	var c bus.Cancel
	if err == nil && len(e.Data) > 0 && string(e.Data) != "null" {
		if uerr := json.Unmarshal(e.Data, &c); uerr != nil {
			err = bus.Errorf(bus.CodeBadEvent, "cancel data must be {\"calls\": [call ids]}: %v", uerr)
		}
	}
	if err != nil {
		r.reject(m, err)
		return
	}
	if b := r.running(parked.BatchKey(e.SessionID, e.ReplyID)); b != nil {
		b.interrupt(c.Calls)
	}
	r.confirming.cancel(e.SessionID, e.ReplyID, c.Calls)
	r.parked(e.SessionID, e.ReplyID, c.Calls)
}

// confirmed holds the cancel functions of the confirmed calls running on
// this router, which belong to no running batch.
type confirmed struct {
	calls sync.Map // call key → context.CancelFunc
}

// add records a running confirmed call; the function returned forgets it.
func (x *confirmed) add(session, replyID, callID string, cancel context.CancelFunc) func() {
	key := bus.CallKey(session, replyID, callID)
	x.calls.Store(key, cancel)
	return func() { cancel(); x.calls.Delete(key) }
}

// cancel cancels the running confirmed calls of a batch named by ids (all
// when empty).
func (x *confirmed) cancel(session, replyID string, ids []string) {
	batch := parked.BatchKey(session, replyID) + "." // ids have no dots: the prefix is the batch's calls
	for key, cancel := range x.calls.Range {
		if id, ok := strings.CutPrefix(key.(string), batch); ok && (len(ids) == 0 || slices.Contains(ids, id)) {
			cancel.(context.CancelFunc)()
		}
	}
}

// interrupt ends the calls named by ids (all when empty) that have no
// result: their results are set under the lock, so a call that has not
// started never starts (execute and runCalls check under the same lock),
// and a running one has its exec request abandoned. The result events are
// published before batch.done can be (done waits for b.publishing).
func (b *batch) interrupt(ids []string) {
	var hit []*callState
	b.mu.Lock()
	for _, c := range b.calls {
		if c.result == nil && (len(ids) == 0 || slices.Contains(ids, c.call.ID)) {
			if c.cancel != nil {
				c.cancel()
			}
			c.result = ptr(interrupted(c.call))
			hit = append(hit, c)
		}
	}
	b.publishing.Add(len(hit))
	b.mu.Unlock()
	for _, c := range hit {
		b.report(c, *c.result)
		b.publishing.Done()
	}
}

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
	defer rb.mu.Unlock()
	if rb.m == nil {
		rb.m = map[string]*batch{}
	}
	if b.key == "" {
		b.key = parked.BatchKey(b.session, b.replyID)
	}
	rb.m[b.key] = b
}

func (rb *runningBatches) untrack(b *batch) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.m[b.key] == b {
		delete(rb.m, b.key)
	}
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
	bs := slices.Collect(maps.Values(rb.m))
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
