package router

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/semaphore"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/schemas"
)

// Stored outputs per session (protocol 5.9).

// outputsBudget bounds the store reads of one seal or one read request.
const outputsBudget = 30 * time.Second

// windowsHeld bounds the bytes of the windows a router serves at once
// (each with its base64 and event until answered: some 3.5 times as much):
// 128 reads of 2 MiB at once held 878 MiB, and the general slots (4096)
// let a session ask for some 30 GiB (session 42, red team).
const windowsHeld = 8 * offload.MaxWindow

// outputs is the router's side of the outputs object store.
type outputs struct {
	*wire
	st   *offload.Store
	srv  *offload.Server
	room *semaphore.Weighted // windowsHeld
	// waiting counts the output.get reads waiting for room, each in one of
	// the router's general slots, which no session share bounds: at most
	// maxWaiting (an eighth of MaxInflight), so the reads of one session
	// never hold every slot for their budget (session 42, redteam42b).
	waiting    atomic.Int64
	maxWaiting int64
}

// onOutputs serves one window of a session's stored output, holding its
// room until answered.
func (r *outputs) onOutputs(m *nats.Msg) {
	ctx, cancel := context.WithTimeout(r.base, outputsBudget)
	defer cancel()
	release := func() {}
	defer func() { release() }()
	r.serve(m, "outputs", offload.TypeGet, offload.TypeChunk, func(e *bus.Event) (any, error) {
		g, err := offload.DecodeGet(e.Data)
		if err != nil {
			return nil, err
		}
		var ch *offload.Chunk
		ch, release, err = r.window(ctx, e.SessionID, g, &r.waiting)
		return ch, err
	})
}

// window serves g once there is room for its window, and returns the
// release of that room; a read that finds none within ctx is busy, and so
// is one that would wait beside maxWaiting others counted in waiting (nil:
// read_output, which waits in its batch's slot, bounded by the session's share).
func (r *outputs) window(ctx context.Context, session string, g offload.Get, waiting *atomic.Int64) (*offload.Chunk, func(), error) {
	n := int64(min(cmp.Or(g.Max, offload.MaxWindow), offload.MaxWindow))
	if !r.room.TryAcquire(n) && !r.wait(ctx, n, waiting) {
		return nil, func() {}, bus.Errorf(bus.CodeBusy, "output.get: the router serves as many windows as it holds at once; ask again")
	}
	ch, err := r.srv.Serve(ctx, session, g)
	return ch, sync.OnceFunc(func() { r.room.Release(n) }), err
}

// wait waits within ctx for n bytes of room, unless waiting already counts
// maxWaiting reads; false when it got none.
func (r *outputs) wait(ctx context.Context, n int64, waiting *atomic.Int64) bool {
	if waiting != nil {
		if waiting.Add(1) > r.maxWaiting {
			waiting.Add(-1)
			return false
		}
		defer waiting.Add(-1)
	}
	return r.room.Acquire(ctx, n) == nil
}

// Serve is window for read_output, which keeps at most its 32 KiB.
func (r *outputs) Serve(ctx context.Context, session string, g offload.Get) (*offload.Chunk, error) {
	ch, release, err := r.window(ctx, session, g, nil)
	release()
	return ch, err
}

// sealOutput returns a worker's result with the digests of the stored
// outputs it refers to; another call's makes it a tool_error (protocol 3.3).
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

// sealAnswer is sealOutput for an external answer (refused: bad_request).
func (r *outputs) sealAnswer(key string, out []bus.Block) ([]bus.Block, error) {
	sealed, err := r.seal(key, out)
	if be := (*offload.BlockError)(nil); errors.As(err, &be) {
		return nil, bus.Errorf(bus.CodeBadRequest, "output[%d]: %v", be.Index, be.Err)
	}
	return sealed, err
}

// seal records the digests of the stored outputs out refers to, for call key.
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
	return slices.ContainsFunc(out, func(b bus.Block) bool { return b.Type == bus.BlockData && strings.HasPrefix(b.URL, offload.Scheme+":") })
}

// fitStep stores the output of a result that would take the batch's
// messages past the payload limit, before any carries it (protocol 5.9).
type fitStep struct {
	outputs    *offload.Offloader // nil: nothing is stored (and nothing checked)
	maxPayload func() int64       // the connection's payload limit
	// taken is what the batch's own continuation takes of the max payload,
	// with its parked calls' shares (parked.Reads.Taken; nil: none).
	taken func(session, replyID string) int
}

// fitReserve is kept free in each aggregate message for the rest of it.
const fitReserve = 64 << 10

// fit returns res, its output stored when it would not fit beside the
// batch's results, and beside its continuation once it parked (the result
// joins it, 1.19); room is checked and reserved under the batch's lock.
func (s fitStep) fit(b *batch, c *callState, res bus.Result) bus.Result {
	if s.outputs == nil {
		return res
	}
	reserve := int64(fitReserve)
	if s.taken != nil {
		reserve += int64(s.taken(b.session, b.replyID))
	}
	room := s.maxPayload() - reserve
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
	out, err := s.outputs.Fit(b.ctx, bus.CallKey(b.session, b.replyID, c.call.ID), res.Output, int(taken+reserve), dup)
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

// takenLocked bounds the bytes the batch's results take in one message.
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

// ReadOutputName is read_output (docs/protocol.md 11; Guard.ReadOutput).
const ReadOutputName = "read_output"

// Bounds of one read_output call.
const (
	// ReadOutputMaxBytes is the most bytes one call returns.
	ReadOutputMaxBytes = 32 << 10
	// ReadOutputDefaultBytes is what a byte read returns without limit.
	ReadOutputDefaultBytes = 8 << 10
	// ReadOutputMaxLines is the most lines one call returns.
	ReadOutputMaxLines = 2000
	// ReadOutputDefaultLines is what a line read returns without limit.
	ReadOutputDefaultLines = 200
)

const readOutputDescription = "Read a part of a tool output that was too large to show in full (a nats-object:// URL in an " +
	"earlier result of this session). Give offset (a byte, from 0) or line (from 1), and limit (bytes with offset, at most " +
	"32768, default 8192; lines with line, at most 2000, default 200). The reply says which part it is and where the next begins."

var readOutputSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"ref":{"type":"string","description":"The output's nats-object:// URL, exactly as the result gave it."},` +
	`"offset":{"type":"integer","minimum":0,"description":"The first byte to read (default 0)."},` +
	`"line":{"type":"integer","minimum":1,"description":"The first line to read (1 is the first), instead of offset."},` +
	`"limit":{"type":"integer","minimum":1,"description":"At most how many bytes (with offset) or lines (with line)."}},` +
	`"required":["ref"],"additionalProperties":false}`)

// readOutputDef is read_output's definition: read-only, safe beside others.
func readOutputDef() bus.ToolDef {
	d := bus.ToolDef{Name: ReadOutputName, Description: readOutputDescription, InputSchema: readOutputSchema,
		ReadOnly: true, ConcurrencySafe: true}
	d.Defaults()
	return d
}

// readOutputTool is the resolved read_output (its schema compiled once).
var readOutputTool = sync.OnceValues(func() (*registry.Tool, error) {
	def := readOutputDef()
	sc, err := schemas.Compile(def.InputSchema)
	return &registry.Tool{Def: def, Schema: sc}, err
})

// readShown reports whether read_output is offered and in a request's view.
func readShown(on bool, req *groups.Request) bool { return on && shown(req, ReadOutputName) }

// withReadOutput puts read_output before the request's tools when shown.
func withReadOutput(on bool, req *groups.Request, defs []bus.ToolDef) []bus.ToolDef {
	if !readShown(on, req) {
		return defs
	}
	at := len(defs) - len(req.External)
	return slices.Insert(slices.Clip(defs), at, readOutputDef())
}

// resolveRead resolves read_output when it is shown (ok: the name is it).
func resolveRead(on bool, req *groups.Request, name string) (groups.Resolved, bool) {
	if name != ReadOutputName || !readShown(on, req) {
		return groups.Resolved{}, false
	}
	t, err := readOutputTool()
	if err != nil { // cannot happen: the schema is built here
		return groups.Resolved{Code: bus.CodeInternal, Message: fmt.Sprintf("InternalError: %v", err)}, true
	}
	return groups.Resolved{Tool: t, Read: true}, true
}

// readInput is read_output's input.
type readInput struct {
	Ref    string `json:"ref"`
	Offset *int64 `json:"offset"`
	Line   *int64 `json:"line"`
	Limit  *int64 `json:"limit"`
}

// windows serves windows of a session's stored outputs (offload.Server).
type windows interface {
	Serve(ctx context.Context, session string, g offload.Get) (*offload.Chunk, error)
}

// readOutput runs read_output on one bounded range of session's own outputs.
func readOutput(ctx context.Context, w windows, session string, c bus.Call, input json.RawMessage) bus.Result {
	var in readInput
	if err := json.Unmarshal(input, &in); err != nil {
		return bus.ErrorResult(c, bus.CodeInvalidInput, "read_output: "+err.Error())
	}
	if in.Offset != nil && in.Line != nil {
		return bus.ErrorResult(c, bus.CodeInvalidInput, "read_output: give offset or line, not both")
	}
	r, err := offload.ParseRef(in.Ref)
	if err != nil {
		return bus.ErrorResult(c, bus.CodeInvalidInput, "read_output: "+err.Error())
	}
	if r.Session() != session {
		// Refused before anything is read: the same words as a missing one.
		return bus.ErrorResult(c, bus.CodeToolError, fmt.Sprintf("read_output: no output %s in this session (it may have expired)", in.Ref))
	}
	var text string
	if in.Line != nil {
		text, err = readLines(ctx, w, session, in.Ref, *in.Line, clampLimit(in.Limit, ReadOutputDefaultLines, ReadOutputMaxLines))
	} else {
		off := int64(0)
		if in.Offset != nil {
			off = *in.Offset
		}
		text, err = readBytes(ctx, w, session, in.Ref, off, int(clampLimit(in.Limit, ReadOutputDefaultBytes, ReadOutputMaxBytes)))
	}
	if err != nil {
		if be, ok := errors.AsType[*bus.Error](err); ok {
			return bus.ErrorResult(c, bus.CodeToolError, "read_output: "+be.Message)
		}
		return bus.ErrorResult(c, bus.CodeToolError, "read_output: "+err.Error())
	}
	return bus.Result{ID: c.ID, Name: c.Name, State: bus.StateSuccess, Output: bus.Text(text)}
}

func clampLimit(l *int64, def, most int64) int64 {
	if l == nil || *l <= 0 {
		return def
	}
	return min(*l, most)
}

// readBytes returns at most n bytes of ref from off, cut at runes, with a header.
func readBytes(ctx context.Context, w windows, session, ref string, off int64, n int) (string, error) {
	ch, err := w.Serve(ctx, session, offload.Get{URL: ref, Offset: off, Max: n + utf8.UTFMax})
	if err != nil {
		return "", err
	}
	if !textual(ch.MediaType) {
		return "", notText(ch)
	}
	data := ch.Data
	start := 0
	for start < len(data) && start < utf8.UTFMax && off+int64(start) > 0 && !utf8.RuneStart(data[start]) {
		start++ // begin at a rune
	}
	end := min(len(data), start+n)
	for end < len(data) && end > start && !utf8.RuneStart(data[end]) {
		end-- // end at a rune
	}
	part := data[start:end]
	from, to := off+int64(start), off+int64(end)
	head := fmt.Sprintf("[read_output: bytes %d to %d of %d (sha256 %s)", from, to, ch.Size, ch.Digest)
	if to < ch.Size {
		head += fmt.Sprintf("; the next part begins at offset %d]", to)
	} else {
		head += "; the end of the output]"
	}
	return head + "\n" + strings.ToValidUTF8(string(part), "\uFFFD"), nil
}

// readLines returns at most n lines (and ReadOutputMaxBytes) of ref from
// line first (1-based), with a header naming them, scanning from the start.
func readLines(ctx context.Context, w windows, session, ref string, first, n int64) (string, error) {
	var (
		off, line int64 = 0, 1
		buf       []byte
		begin     = int64(-1) // offset of the first line wanted
		got       int64
		size      int64
		digest    string
	)
	for {
		ch, err := w.Serve(ctx, session, offload.Get{URL: ref, Offset: off})
		if err != nil {
			return "", err
		}
		if !textual(ch.MediaType) {
			return "", notText(ch)
		}
		size, digest = ch.Size, ch.Digest
		data := ch.Data
		i := 0
		if begin < 0 {
			for line < first && i < len(data) {
				j := bytes.IndexByte(data[i:], '\n')
				if j < 0 {
					i = len(data)
					break
				}
				i += j + 1
				line++
			}
			if line == first {
				begin = off + int64(i)
			}
		}
		if begin >= 0 {
			for i < len(data) && got < n && len(buf) < ReadOutputMaxBytes {
				j := bytes.IndexByte(data[i:], '\n')
				end := len(data)
				if j >= 0 {
					end = i + j + 1
				}
				take := min(end, i+ReadOutputMaxBytes-len(buf))
				buf = append(buf, data[i:take]...)
				if take == end && j >= 0 {
					got++
				}
				i = take
			}
		}
		off += int64(len(data))
		if off >= size || len(data) == 0 || got >= n || len(buf) >= ReadOutputMaxBytes {
			break
		}
	}
	if begin < 0 {
		return "", fmt.Errorf("line %d is past the end of the output (%d lines, %d bytes)", first, line, size)
	}
	to := begin + int64(len(buf))
	// A line cut by the byte bound ends at a rune.
	for len(buf) > 0 && !utf8.Valid(buf) && to < size {
		buf, to = buf[:len(buf)-1], to-1
	}
	last := first + got - 1
	if to > begin && buf[len(buf)-1] != '\n' {
		last++ // a last line without its end (cut, or the output's last)
	}
	head := fmt.Sprintf("[read_output: lines %d to %d, bytes %d to %d of %d (sha256 %s)", first, last, begin, to, size, digest)
	switch {
	case to >= size:
		head += "; the end of the output]"
	case len(buf) > 0 && buf[len(buf)-1] == '\n':
		head += fmt.Sprintf("; the next part begins at line %d]", last+1)
	default:
		head += fmt.Sprintf("; line %d was cut at %d bytes: go on with offset %d]", last, ReadOutputMaxBytes, to)
	}
	return head + "\n" + strings.ToValidUTF8(string(buf), "\uFFFD"), nil
}

func notText(ch *offload.Chunk) error {
	return fmt.Errorf("the output is %s (%d bytes), not text: read_output reads text only", ch.MediaType, ch.Size)
}

// textual reports whether a media type is text, JSON or XML.
func textual(media string) bool {
	mt, _, err := mime.ParseMediaType(media)
	if err != nil {
		return false
	}
	return strings.HasPrefix(mt, "text/") || mt == "application/json" || mt == "application/xml" ||
		strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml")
}
