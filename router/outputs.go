package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
)

// Stored outputs per session (protocol 5.9): agents read through the
// router on P.outputs.<session>, only that session's objects and only
// bytes the result recorded; a result or answer may refer only to objects
// stored for that very call, and the router records each one's digest.

// outputsBudget bounds the store reads of one seal or one read request.
const outputsBudget = 30 * time.Second

// outputs is the router's side of the outputs object store.
type outputs struct {
	*wire
	st  *offload.Store
	srv *offload.Server
}

func newOutputs(w *wire, bucket string) *outputs {
	st := offload.NewStore(w.nc, bucket)
	return &outputs{wire: w, st: st, srv: offload.NewServer(st, offload.Window(w.nc.MaxPayload()))}
}

// onOutputs serves one window of a session's stored output.
func (r *outputs) onOutputs(m *nats.Msg) {
	r.serve(m, "outputs", offload.TypeGet, offload.TypeChunk, func(e *bus.Event) (any, error) {
		g, err := offload.DecodeGet(e.Data)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(r.base, outputsBudget)
		defer cancel()
		return r.srv.Serve(ctx, e.SessionID, g)
	})
}

// sealOutput checks the stored outputs a worker's result refers to and
// returns the result with their digests; a reference to an object not this
// call's own makes it a tool_error, its state patch dropped (protocol 3.3).
func (r *outputs) sealOutput(session, key string, res bus.Result, patch json.RawMessage) (bus.Result, json.RawMessage) {
	out, err := r.seal(key, res.Output)
	if err == nil {
		res.Output = out
		return res, patch
	}
	if be := (*offload.BlockError)(nil); errors.As(err, &be) {
		r.log.Warn("router: a result's stored output refused", "session", session, "call", key, "err", err)
		return bus.ErrorResult(bus.Call{ID: res.ID, Name: res.Name}, bus.CodeToolError,
			fmt.Sprintf("Error: the tool returned an invalid output block %d: %v", be.Index, be.Err)), nil
	}
	return internal(bus.Call{ID: res.ID, Name: res.Name}, fmt.Errorf("checking the stored output: %w", err)), nil
}

// sealAnswer is sealOutput for an external answer: a refused reference is
// a bad_request and the call stays parked.
func (r *outputs) sealAnswer(key string, out []bus.Block) ([]bus.Block, error) {
	sealed, err := r.seal(key, out)
	if be := (*offload.BlockError)(nil); errors.As(err, &be) {
		return nil, bus.Errorf(bus.CodeBadRequest, "output[%d]: %v", be.Index, be.Err)
	}
	return sealed, err
}

// seal records the digests of the stored outputs out refers to, for call
// key; out as it is when it refers to none.
func (r *outputs) seal(key string, out []bus.Block) ([]bus.Block, error) {
	if !hasStored(out) {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(r.base, outputsBudget)
	defer cancel()
	return r.st.Seal(ctx, key, out)
}

// hasStored reports whether any block refers to a stored output.
func hasStored(out []bus.Block) bool {
	for _, b := range out {
		if b.Type == bus.BlockData && len(b.URL) > len(offload.Scheme) && b.URL[:len(offload.Scheme)+1] == offload.Scheme+":" {
			return true
		}
	}
	return false
}

// fitStep keeps a batch's aggregate messages (the reply, batch.done, the
// continuation) within the payload limit: it stores the output of a result
// that would take them past it, before any message carries it, so all show
// the same reference (docs/protocol.md 5.9).
type fitStep struct {
	outputs    outputPort   // nil: nothing is stored (and nothing checked)
	maxPayload func() int64 // the connection's payload limit
}

// fitReserve is kept free in each aggregate message for the envelope, the
// parked list and the other members.
const fitReserve = 64 << 10

// fit returns res, its output stored when the batch's results and res
// would not fit in one message. Check and reservation are one step under
// the batch's lock, so concurrent calls cannot count on the same room.
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

// resultOverhead bounds what a result takes beside its output.
const resultOverhead = 1 << 10

// takenLocked is how many bytes the batch's results take in an aggregate
// message, bounding those that came from elsewhere (a continuation).
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
