package client

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	waits "github.com/toolbus/toolbus/internal/replies"
)

// requester is what the Client's verbs share: requests (retrying busy),
// their replies or errors, and the sessions' revisions.
type requester struct {
	nc      *nats.Conn
	subj    bus.Subjects
	source  string
	timeout time.Duration // Config.Timeout: for requests whose context has no deadline
	revs    sessionRevs
	replies *replies     // the reply subjects of its requests (inbox.go)
	resend  waits.Resend // Config.Resend's, for batches
	badRS   error        // Config.Resend's negative fields: every batch fails with it
}

func (c *requester) batchEvent(session string, b bus.Batch, opts []CallOption) (*bus.Event, error) {
	e := new(bus.Event)
	return e, c.batchIn(session, &b, opts, make([]byte, 0, batchSize(&b)), e)
}

// batchIn is batchEvent with the data appended to buf and the event
// written to e, which Call keeps on its stack (no copy of it returned).
func (c *requester) batchIn(session string, b *bus.Batch, opts []CallOption, buf []byte, e *bus.Event) error {
	if b.SessionRev == 0 {
		b.SessionRev = c.revs.get(session) // docs/protocol.md 4.2: echoed per session
	}
	data, err := b.AppendJSON(buf)
	if err != nil {
		return bus.Errorf(bus.CodeBadRequest, "batch: %v", err)
	}
	if err := checkSession(session); err != nil {
		return err
	}
	*e = bus.Head(bus.TypeCallBatch, c.source)
	e.SessionID, e.Data = session, data
	if len(opts) > 0 { // the options get a copy on the heap: e stays where it is
		p := new(bus.Event)
		*p = *e
		for _, o := range opts {
			o(p)
		}
		*e = *p
	}
	return nil
}

// batchBufs are the buffers Call encodes its batches in, up to maxPooledBatch.
var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledBatch = 64 << 10

// batchSize is a first guess at the bytes of b's JSON, for a buffer.
func batchSize(b *bus.Batch) int {
	n := 64 + len(b.User) + len(b.Context)
	for i := range b.Calls {
		n += 32 + len(b.Calls[i].ID) + len(b.Calls[i].Name) + len(b.Calls[i].Input)
	}
	return n
}

// checkSession refuses a session id that is set and not valid.
func checkSession(session string) error {
	if session != "" && !bus.ValidID(session) {
		return bus.Errorf(bus.CodeBadEvent, "session id %q must match ^[A-Za-z0-9_-]{1,128}$", session)
	}
	return nil
}

func (c *requester) event(typ, session string, data any) (*bus.Event, error) {
	if err := checkSession(session); err != nil {
		return nil, err
	}
	e, err := bus.NewEvent(typ, c.source, data)
	if err != nil {
		return nil, err
	}
	e.SessionID = session
	return e, nil
}

// ask sends data as an event of type typ for session to subject and
// decodes the reply, of type want, into out (exchange).
func (c *requester) ask(ctx context.Context, subject, typ, session string, data any, want string, out any, def time.Duration) error {
	e, err := c.event(typ, session, data)
	if err != nil {
		return err
	}
	return c.exchange(ctx, subject, e, false, want, out, def)
}

// exchange sends e to subject and decodes a reply of type want into out; an
// io.toolbus.error reply becomes a *bus.Error. trusted: e's data is the
// client's own valid JSON, not scanned again.
func (c *requester) exchange(ctx context.Context, subject string, e *bus.Event, trusted bool, want string, out any, def time.Duration) error {
	var re bus.Event
	_, err := c.roundTrip(ctx, subject, e, trusted, want, def, waits.Resend{}, &re)
	if err != nil || out == nil {
		return err
	}
	return re.DataAs(out)
}

// call is exchange for Call: the reply's data, when plain, read in its
// event's pass (bus.DecodeReplyView), else by Reply.FromEvent.
func (c *requester) call(ctx context.Context, subject string, e *bus.Event, trusted bool) (*bus.Reply, error) {
	if c.badRS != nil {
		return nil, c.badRS
	}
	rs := c.resend
	rs.ReplyID = e.ID
	var re bus.Event
	reply, err := c.roundTrip(ctx, subject, e, trusted, bus.TypeCallReply, 10*time.Minute, rs, &re)
	if err != nil || reply != nil {
		return reply, err
	}
	reply = new(bus.Reply)
	return reply, reply.FromEvent(&re)
}

// roundTrip sends e to subject and reads the reply's event, of type want,
// into re (its attributes views of the reply's data: what the caller
// keeps, it copies) and returns, for want io.toolbus.call.reply, its data
// when plain; an io.toolbus.error reply is a *bus.Error. rs re-sends a
// batch (3.2.1).
func (c *requester) roundTrip(ctx context.Context, subject string, e *bus.Event, trusted bool, want string, def time.Duration, rs waits.Resend, re *bus.Event) (*bus.Reply, error) {
	var until time.Time // without a caller's deadline: def, kept by the wait, not a context
	if _, ok := ctx.Deadline(); !ok {
		if c.timeout > 0 {
			def = c.timeout
		}
		until = time.Now().Add(def)
	}
	resp, err := c.send(ctx, until, subject, e, trusted, rs)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("client: no router serves %s: %w", subject, err)
		}
		return nil, fmt.Errorf("client: %s: %w", subject, err)
	}
	reply, err := bus.DecodeReplyView(resp, re, want == bus.TypeCallReply)
	if err != nil {
		return nil, fmt.Errorf("client: reply: %w", err)
	}
	if re.Type == bus.TypeError {
		be := new(bus.Error)
		if err := re.DataAs(be); err != nil {
			return nil, err
		}
		return nil, be
	}
	if re.Type != want {
		return nil, fmt.Errorf("client: expected %s, got %s", want, re.Type)
	}
	return reply, nil
}

// send sends e as a request, retrying a busy reply (nothing ran) with a
// growing, jittered backoff until ctx ends or until passes.
func (c *requester) send(ctx context.Context, until time.Time, subject string, e *bus.Event, trusted bool, rs waits.Resend) (*nats.Msg, error) {
	defer runtime.KeepAlive(c) // c owns the reply subscription (New's runtime.AddCleanup)
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		resp, err := c.replies.requestUntil(ctx, until, subject, e, trusted, rs)
		if err != nil || !isBusy(resp) {
			return resp, err
		}
		pause := backoff/2 + rand.N(backoff)
		if !until.IsZero() {
			if left := time.Until(until); left < pause {
				_ = bus.Sleep(ctx, left)
				return resp, nil
			}
		}
		if bus.Sleep(ctx, pause) != nil {
			return resp, nil
		}
	}
}

// isBusy reports whether resp is an io.toolbus.error with code busy.
func isBusy(resp *nats.Msg) bool {
	if len(resp.Data) > 4096 || !bytes.Contains(resp.Data, []byte(`"busy"`)) {
		return false // an error event is small; spare big replies a decoding
	}
	re, err := bus.Decode(resp)
	if err != nil || re.Type != bus.TypeError {
		return false
	}
	var be bus.Error
	return re.DataAs(&be) == nil && be.Code == bus.CodeBusy
}

// sendAnswer sends an answer or confirmation (what) to subject and waits for
// the acknowledgement, forgetting the session's revision around it.
func (c *requester) sendAnswer(ctx context.Context, subject, session, replyID, callID string, a bus.Answer, what string) error {
	c.revs.forget(session)
	defer c.revs.forget(session)
	e, err := c.event(bus.TypeAnswer, session, a)
	if err != nil {
		return err
	}
	e.ReplyID, e.ToolCallID = replyID, callID
	var ack bus.AnswerAck
	if err := c.exchange(ctx, subject, e, false, bus.TypeAnswerAck, &ack, 10*time.Second); err != nil {
		return err
	}
	if !ack.Accepted {
		return bus.Errorf(bus.CodeInternal, "%s not accepted", what)
	}
	return nil
}

// window asks a router for the bytes of ref from off.
func (c *requester) window(ctx context.Context, session, ref string, off int64) (*offload.Chunk, error) {
	var ch offload.Chunk
	if err := c.ask(ctx, c.subj.Outputs(session), offload.TypeGet, session, offload.Get{URL: ref, Offset: off}, offload.TypeChunk, &ch, 30*time.Second); err != nil {
		return nil, err
	}
	return &ch, nil
}

// maxRevs bounds the sessions whose revision a Client remembers; past it
// the memory starts afresh.
const maxRevs = 4096

// sessionRevs remembers each session's revision of the last reply or
// listing, sent back as the batch's sessionrev (docs/protocol.md 4.2); the
// Client's other writes to a session forget it.
type sessionRevs struct {
	mu  sync.Mutex
	rev map[string]uint64
}

// get returns the revision to send for session; 0 when none is known.
func (s *sessionRevs) get(session string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev[session]
}

// saw records a revision a router reported for session, unless older or 0.
func (s *sessionRevs) saw(session string, rev uint64) {
	if rev == 0 || session == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rev == nil || len(s.rev) >= maxRevs {
		s.rev = map[string]uint64{}
	}
	if old, ok := s.rev[session]; !ok || rev > old { // one lookup when it is known already
		s.rev[session] = rev
	}
}

// forget drops what is known of session.
func (s *sessionRevs) forget(session string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.rev, session)
}

// replies sends the Client's requests and waits for their replies on one
// reply subscription of its own (internal/replies); a late reply is dropped.
// Its cleanup is on the requester, which each request holds until its reply.
type replies struct{ mux *waits.Mux }

// windows is r with its defaults, as the reply wait takes it (Max 0: off);
// a negative field is an error, as the Python and Java clients refuse one.
func (r Resend) windows() (waits.Resend, error) {
	if r.First < 0 || r.AfterNotice < 0 || r.Max < 0 {
		return waits.Resend{}, fmt.Errorf("client: Resend%+v: a negative window or Max (zero means the default; Off: true, no re-sends)", r)
	}
	if r.Off {
		return waits.Resend{}, nil
	}
	return waits.Resend{First: cmp.Or(r.First, 6*time.Second), AfterNotice: cmp.Or(r.AfterNotice, 15*time.Second), Max: cmp.Or(r.Max, 3)}, nil
}

// newReplies: a closed connection ends a request at once, as nats.go's
// does; notices: it takes running notices (Config.Resend).
func newReplies(nc *nats.Conn, notices bool) *replies {
	return &replies{mux: waits.New(nc, waits.Options{EndOnClose: true, Notices: notices})}
}

func (r *replies) close() { r.mux.Unsubscribe() }

// requestUntil sends e to subject and waits for the reply until ctx ends or
// until passes (zero: never), with nats.Conn.RequestMsgWithContext's errors
// (context.DeadlineExceeded at until). e's data is checked unless trusted.
// A re-send (rs) encodes e again: the same bytes.
func (r *replies) requestUntil(ctx context.Context, until time.Time, subject string, e *bus.Event, trusted bool, rs waits.Resend) (*nats.Msg, error) {
	return r.mux.RequestUntil(ctx, until, nil, rs, func(inbox string) error {
		publish := func(m *nats.Msg) error {
			m.Reply = inbox
			return r.mux.Conn().PublishMsg(m)
		}
		if trusted {
			return bus.SendTrusted(subject, e, "", publish)
		}
		return bus.SendWith(subject, e, "", publish)
	})
}
