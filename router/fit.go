package router

import (
	"fmt"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
)

// The reply, batch.done and a parked batch's continuation each carry every
// result of the batch in one message, so together the results must fit in
// the NATS payload limit even when each alone does (a worker keeps each
// result within it, docs/protocol.md 5.9). fit stores the output of a result
// that would take the batch past the limit, as the worker would have,
// before any message carries it: the call's event, the reply and
// batch.done then show the same reference.

// fitStep is the step that keeps a batch's aggregate messages within the
// payload limit, over the output port.
type fitStep struct {
	outputs    outputPort   // nil: nothing is stored (and nothing checked)
	maxPayload func() int64 // the connection's payload limit
}

// fitReserve is kept free in each aggregate message for the envelope, the
// parked list and the other members.
const fitReserve = 64 << 10

// fit returns res, or res with its output stored when the batch's results
// so far and res would not fit in one message. The check and the
// reservation of res's bytes are one step under the batch's lock, so calls
// finishing at once cannot each count on the same room.
func (s fitStep) fit(b *batch, c *callState, res bus.Result) bus.Result {
	if s.outputs == nil {
		return res
	}
	room := s.maxPayload() - fitReserve
	dup := res.State != bus.StateSuccess
	size := offload.Bound(res.Output, dup) // cheap, and exact enough for small outputs
	if size > 64<<10 {
		size = offload.Size(res.Output, dup)
	}
	size += resultOverhead
	b.mu.Lock()
	taken := b.takenLocked()
	if taken+size <= room {
		c.size = size
		b.mu.Unlock()
		return res
	}
	c.size = resultOverhead // held while its output is stored
	b.mu.Unlock()
	// Fit bounds its own store writes (offload.PutTimeout), past a cancel too.
	out, err := s.outputs.Fit(b.ctx, bus.CallKey(b.session, b.replyID, c.call.ID), res.Output, int(taken)+fitReserve, dup)
	if err != nil {
		return internal(c.call, fmt.Errorf("the batch's results do not fit in one message and this output could not be stored: %w", err))
	}
	res.Output = out
	b.mu.Lock()
	c.size = offload.Size(out, dup) + resultOverhead
	b.mu.Unlock()
	return res
}

// resultOverhead bounds what a result takes beside its output: id, name,
// state, error code and message (the text is counted with the output),
// metadata.
const resultOverhead = 1 << 10

// takenLocked is how many bytes the batch's results take in an aggregate
// message: those fit admitted, and a bound of those that came from
// elsewhere (the continuation, an earlier copy of the batch).
func (b *batch) takenLocked() int64 {
	var n int64
	for _, c := range b.calls {
		switch {
		case c.size > 0:
			n += c.size
		case c.result != nil:
			n += offload.Bound(c.result.Output, c.result.State != bus.StateSuccess) + resultOverhead
		}
	}
	return n
}
