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

// Stored outputs per session (protocol 5.9). Agents have no access to the
// outputs object store: they read through the router on
// P.outputs.<session>, which serves only that session's objects and only
// when their bytes are the ones the result recorded. Workers and handlers
// still store objects themselves (an output may exceed max_payload), but a
// result or answer may refer only to objects stored for that very call,
// and the router records each object's digest in the reference it passes
// on.

// outputsBudget bounds the store reads of one seal or one read request.
const outputsBudget = 30 * time.Second

// outputs is the router's side of the outputs object store.
type outputs struct {
	*wire
	base context.Context
	st   *offload.Store
	srv  *offload.Server
}

func newOutputs(w *wire, base context.Context, bucket string) *outputs {
	st := offload.NewStore(w.nc, bucket)
	return &outputs{wire: w, base: base, st: st, srv: offload.NewServer(st, offload.Window(w.nc.MaxPayload()))}
}

// onOutputs serves io.toolbus.output.get on P.outputs.<session>: one
// window of a stored output of that session, or an io.toolbus.error.
func (r *outputs) onOutputs(m *nats.Msg) {
	e, err := r.decode(m, "outputs", offload.TypeGet)
	if err != nil {
		r.reject(m, err)
		return
	}
	g, err := offload.DecodeGet(e.Data)
	if err != nil {
		r.reject(m, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.base, outputsBudget)
	defer cancel()
	c, err := r.srv.Serve(ctx, e.SessionID, g)
	if err != nil {
		r.reject(m, err)
		return
	}
	r.respond(m, offload.TypeChunk, c, "output chunk reply")
}

// sealOutput checks the stored outputs a worker's result refers to
// (offload.Store.Seal) and returns the result with their digests; a
// reference to an object that is not this call's own turns the result
// into a tool_error saying so, and its state patch is dropped, as for any
// invalid output block (protocol 3.3).
func (r *outputs) sealOutput(session, key string, res bus.Result, patch json.RawMessage) (bus.Result, json.RawMessage) {
	if !hasStored(res.Output) {
		return res, patch
	}
	ctx, cancel := context.WithTimeout(r.base, outputsBudget)
	defer cancel()
	out, err := r.st.Seal(ctx, key, res.Output)
	if err != nil {
		var be *offload.BlockError
		if errors.As(err, &be) {
			r.log.Warn("router: a result's stored output refused", "session", session, "call", key, "err", err)
			return bus.ErrorResult(bus.Call{ID: res.ID, Name: res.Name}, bus.CodeToolError,
				fmt.Sprintf("Error: the tool returned an invalid output block %d: %v", be.Index, be.Err)), nil
		}
		return internal(bus.Call{ID: res.ID, Name: res.Name}, fmt.Errorf("checking the stored output: %w", err)), nil
	}
	res.Output = out
	return res, patch
}

// sealAnswer is sealOutput for an external answer: a refused reference is
// a bad_request and the call stays parked.
func (r *outputs) sealAnswer(key string, out []bus.Block) ([]bus.Block, error) {
	if !hasStored(out) {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(r.base, outputsBudget)
	defer cancel()
	sealed, err := r.st.Seal(ctx, key, out)
	if err != nil {
		var be *offload.BlockError
		if errors.As(err, &be) {
			return nil, bus.Errorf(bus.CodeBadRequest, "output[%d]: %v", be.Index, be.Err)
		}
		return nil, err
	}
	return sealed, nil
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
