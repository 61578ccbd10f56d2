// Package client is the agent's side of toolbus: call a batch of tools,
// list the tools a session's model may see, stream a session's events,
// cancel calls, answer parked calls and run admin verbs.
package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/natsconn"
)

// Config configures a Client.
type Config struct {
	// Prefix is the deployment's subject prefix; "" means bus.DefaultPrefix.
	Prefix string
	// Source is the CloudEvents source of the agent; "" means "toolbus/client".
	Source string
	// Timeout bounds requests whose context has no deadline; zero means
	// 10 minutes for calls and 10 seconds for everything else.
	Timeout time.Duration
	// InlineLimit is the encoded size of an answer's output above which its
	// largest blocks are stored as references (docs/protocol.md 5.9); zero
	// means 1 MiB, capped by the payload limit less 64 KiB.
	InlineLimit int
	// MaxOutput is the encoded size of an answer's output above which
	// Parked().Answer refuses it, sending and storing nothing, and the size
	// of a stored output Outputs().Fetch refuses at its first window (as
	// Python's and Java's do); zero means 64 MiB.
	MaxOutput int64
	// Resend re-sends a batch the routers are silent about (docs/protocol.md
	// 3.2.1); zero fields mean the defaults, Resend{Off: true} never does. A
	// negative field is refused: New returns no error, so Call and Parked().Ask
	// return it, sending nothing.
	Resend Resend
}

// Resend says when Call publishes its batch again, the same message under
// the same reply id (docs/protocol.md 3.1, 3.2.1): First (6 s) after a send
// without the reply or a running notice, AfterNotice (15 s) after a notice,
// each with up to 20 % jitter, at most Max (3) times; the timeout still
// counts from the first send. Off: one send only, as before 1.25.
type Resend struct {
	First, AfterNotice time.Duration
	Max                int
	Off                bool
}

// Client talks to the routers of one deployment; its methods are the
// agent's verbs, one each, and the verbs of parked calls, stored outputs and
// background tasks are on Parked, Outputs and Tasks (docs/client.md). It is
// safe for concurrent use.
type Client struct {
	nc    *nats.Conn
	subj  bus.Subjects
	cfg   Config
	off   *offload.Offloader
	owned bool // dialed by Dial: Close closes it
	rq    *requester
}

// New returns a Client on nc.
func New(nc *nats.Conn, cfg Config) *Client {
	cfg.Source = cmp.Or(cfg.Source, "toolbus/client")
	subj := bus.NewSubjects(cfg.Prefix)
	// offload.New fails only on bad jetstream options, and gets none.
	off, _ := offload.New(nc, subj.ObjectStore(bus.ObjectOutputs), offload.Limits{Inline: max(cfg.InlineLimit, 0), Max: max(cfg.MaxOutput, 0)})
	rep := newReplies(nc, !cfg.Resend.Off)
	rs, bad := cfg.Resend.windows()
	c := &Client{nc: nc, subj: subj, cfg: cfg, off: off,
		rq: &requester{nc: nc, subj: subj, source: cfg.Source, timeout: cfg.Timeout, replies: rep, resend: rs, badRS: bad}}
	// On the requester, which requests under way hold, not on the Client.
	runtime.AddCleanup(c.rq, (*replies).close, rep)
	return c
}

// Dial connects with conn (natsconn.FromEnv() reads the nats CLI's
// environment: URLs, credentials, TLS, inbox prefix) and returns a Client
// on that connection; Close closes it.
//
//	cl, err := client.Dial(natsconn.FromEnv(), client.Config{Source: "my-agent"})
func Dial(conn natsconn.Config, cfg Config) (*Client, error) {
	nc, err := conn.Connect(cmp.Or(cfg.Source, "toolbus/client"))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c := New(nc, cfg)
	c.owned = true
	return c, nil
}

// Close closes the connection of a Client made by Dial, once what it
// published has reached the server (when connected) or ctx has ended (then
// it returns ctx's error); a Client made by New leaves its connection to
// the caller. It is safe to call twice.
func (c *Client) Close(ctx context.Context) error {
	if !c.owned || c.nc.IsClosed() {
		return nil
	}
	var err error
	if c.nc.IsConnected() {
		err = bus.Flush(ctx, c.nc)
	}
	c.nc.Close()
	if err != nil {
		return fmt.Errorf("client: close: %w", err)
	}
	return nil
}

// Conn returns the Client's connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Subjects returns the deployment's subject names.
func (c *Client) Subjects() bus.Subjects { return c.subj }

// CallOption sets a per-call knob.
type CallOption func(*bus.Event)

// WithReplyID sets the batch's reply id (the event id); by default a fresh
// one is chosen. Re-sending with the same reply id is deduplicated.
func WithReplyID(id string) CallOption { return func(e *bus.Event) { e.ID = id } }

// WithExpiry sets the batch's expirytime, shortening every tool's timeout.
func WithExpiry(t time.Time) CallOption {
	return func(e *bus.Event) { e.ExpiryTime = t.UTC().Format(time.RFC3339Nano) }
}

// WithTraceParent sets the W3C traceparent of the batch.
func WithTraceParent(tp string) CallOption { return func(e *bus.Event) { e.TraceParent = tp } }

// Call sends one model turn's calls and waits for the reply (finished
// results and parked calls); a rejected batch is a *bus.Error.
func (c *Client) Call(ctx context.Context, session string, b bus.Batch, opts ...CallOption) (*bus.Reply, error) {
	return c.rq.batch(ctx, bus.CallMsg(c.subj, session), session, b, opts)
}

// batch is Call on subject.
func (r *requester) batch(ctx context.Context, subject, session string, b bus.Batch, opts []CallOption) (*bus.Reply, error) {
	buf := batchBufs.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= maxPooledBatch {
			batchBufs.Put(buf)
		}
	}()
	var e bus.Event
	if err := r.batchIn(session, &b, opts, (*buf)[:0], &e); err != nil {
		return nil, err
	}
	*buf = e.Data[:0]         // grown, when it had to
	trusted := len(opts) == 0 // the data is AppendJSON's, unless an option of the caller's set other data
	reply, err := r.call(ctx, subject, &e, trusted)
	if err != nil {
		return nil, err
	}
	calls := b.Calls
	if !trusted { // an option may have set other data: the calls sent are its
		var sent struct {
			Calls []bus.Call `json:"calls"`
		}
		if json.Unmarshal(e.Data, &sent) == nil {
			calls = sent.Calls
		}
	}
	if !namesEach(calls, reply) {
		// Anyone who may answer on the call subject first could name other calls.
		return nil, bus.Errorf(bus.CodeBadEvent, "reply: its results and parked calls do not name each call of the batch once (3.2)")
	}
	r.revs.saw(session, reply.SessionRev)
	return reply, nil
}

// namesEach reports whether rep names each of calls once, finished or
// parked (protocol 3.2).
func namesEach(calls []bus.Call, rep *bus.Reply) bool {
	if len(rep.Results)+len(rep.Parked) != len(calls) {
		return false
	}
	for _, c := range calls {
		n := 0
		for i := range rep.Results {
			n += b2i(rep.Results[i].ID == c.ID)
		}
		for i := range rep.Parked {
			n += b2i(rep.Parked[i].ID == c.ID)
		}
		if n != 1 {
			return false
		}
	}
	return true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Publish sends a batch without waiting; results arrive as events on the
// session's events subject. It returns the reply id.
func (c *Client) Publish(session string, b bus.Batch, opts ...CallOption) (string, error) {
	e, err := c.rq.batchEvent(session, b, opts)
	if err != nil {
		return "", err
	}
	// A copy: the carved id would keep its whole block alive (internal/slab).
	return strings.Clone(e.ID), bus.Publish(c.nc, c.subj.Call(session), e)
}

// Tools asks which tools the session's model sees, in format (bus.Format*;
// "" means toolbus), with an optional request-scoped configuration.
func (c *Client) Tools(ctx context.Context, session, format string, req *bus.Request) (*bus.ToolsList, error) {
	return c.Query(ctx, session, bus.ToolsQuery{Request: req, Format: format})
}

// Query is Tools with the whole query: a user (docs/protocol.md 4.1: it selects
// the user's skills) as well as the format and request.
func (c *Client) Query(ctx context.Context, session string, q bus.ToolsQuery) (*bus.ToolsList, error) {
	var list bus.ToolsList
	if err := c.rq.ask(ctx, c.subj.Tools(session), bus.TypeToolsQuery, session, q, bus.TypeToolsList, &list, 10*time.Second); err != nil {
		return nil, err
	}
	c.rq.revs.saw(session, list.SessionRev)
	return &list, nil
}

// Cancel interrupts the calls of reply id (all of them when calls is empty).
// A cancel naming more than bus.MaxCancelCalls ids is bad_event and nothing
// is sent: routers and workers drop such a cancel whole (docs/protocol.md 3.5).
func (c *Client) Cancel(ctx context.Context, session, replyID string, calls ...string) error {
	if len(calls) > bus.MaxCancelCalls {
		return bus.Errorf(bus.CodeBadEvent, "a cancel names %d calls; at most %d are allowed", len(calls), bus.MaxCancelCalls)
	}
	e, err := c.rq.event(bus.TypeCallCancel, session, bus.Cancel{Calls: calls})
	if err != nil {
		return err
	}
	e.ReplyID = replyID
	if err := bus.Publish(c.nc, c.subj.Cancel(session), e); err != nil {
		return err
	}
	return bus.Flush(ctx, c.nc)
}

// Admin runs an admin verb (docs/protocol.md section 9) and decodes the reply's
// data into out (which may be nil). session is "" for deployment verbs.
func (c *Client) Admin(ctx context.Context, verb, session string, data, out any) error {
	if data == nil {
		data = struct{}{}
	}
	c.rq.revs.forget(session) // the verb may write the session (and again once it did)
	defer c.rq.revs.forget(session)
	return c.rq.ask(ctx, c.subj.Admin(verb), bus.TypeAdmin, session, data, bus.TypeAdminReply, out, 10*time.Second)
}

// Events is a stream of a session's events.
type Events struct {
	C    <-chan *bus.Event
	c    chan *bus.Event
	stop context.CancelFunc
	done chan struct{} // closed with C
}

// newEvents returns a stream and the context of its producer, a child of
// parent that Stop ends.
func newEvents(parent context.Context) (context.Context, *Events) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan *bus.Event, 1024)
	return ctx, &Events{C: ch, c: ch, stop: cancel, done: make(chan struct{})}
}

// send decodes m and hands the event to C, unless ctx ends first (then it
// reports false); a message that does not decode is skipped.
func (s *Events) send(ctx context.Context, m *nats.Msg) bool {
	e, err := bus.Decode(m)
	if err != nil {
		return true
	}
	select {
	case s.c <- e:
		return true
	case <-ctx.Done():
		return false
	}
}

// end closes C; the producer's last step.
func (s *Events) end() {
	close(s.c)
	close(s.done)
}

// Stop ends the stream and waits until C is closed or ctx ends (then C is
// still closed soon). It is safe to call twice.
func (s *Events) Stop(ctx context.Context) error {
	s.stop()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("client: events stop: %w", ctx.Err())
	}
}

// Watch streams the session's events ("*": every session's) live from its
// return; Replay reads what was published before.
func (c *Client) Watch(ctx context.Context, session string) (*Events, error) {
	if session != "*" && !bus.ValidID(session) {
		return nil, bus.Errorf(bus.CodeBadEvent, "session id %q is not valid", session)
	}
	ctx, ev := newEvents(ctx)
	each := func(m *nats.Msg) bool { return ev.send(ctx, m) }
	if err := bus.Listen(ctx, c.nc, c.subj.Events(session), 1024, each, ev.end); err != nil {
		ev.stop()
		return nil, fmt.Errorf("client: watch: %w", err)
	}
	return ev, nil
}

// Replay streams the session's events kept by the events stream, from the
// first one still kept, then live ones, through a router-made consumer
// (P.replay.<session>, docs/protocol.md 3.4) made again when lost; for every
// session ("*") through an ordered consumer of its own.
func (c *Client) Replay(ctx context.Context, session string) (*Events, error) {
	if bus.ValidID(session) {
		f := &follower{c: c, subject: c.subj.Replay(session), session: session, create: bus.TypeReplay, ready: bus.TypeReplayReady}
		ev, err := f.start(ctx)
		if err != nil {
			return nil, fmt.Errorf("client: replay: %w", err)
		}
		return ev, nil
	}
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, err
	}
	ctx, ev := newEvents(ctx)
	var cc jetstream.ConsumeContext
	cons, err := js.OrderedConsumer(ctx, c.subj.Stream(bus.StreamEvents), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{c.subj.Events(session)}})
	if err == nil {
		cc, err = cons.Consume(func(m jetstream.Msg) {
			ev.send(ctx, &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
		})
	}
	if err != nil {
		ev.stop()
		return nil, fmt.Errorf("client: replay: %w", err)
	}
	context.AfterFunc(ctx, func() {
		cc.Stop()
		<-cc.Closed()
		ev.end()
	})
	return ev, nil
}

// IsStored reports whether a block is a reference to a stored output.
func IsStored(b bus.Block) bool {
	return b.Type == bus.BlockData && strings.HasPrefix(b.URL, offload.Scheme+"://")
}

// NewReplyID returns a fresh reply id.
func NewReplyID() string { return nuid.Next() }

// NewAskID returns a fresh reply id of a bridge's question (bus.AskPrefix).
func NewAskID() string { return bus.AskPrefix + nuid.Next() }

// Input marshals v as a call input.
func Input(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("client: input: %v", err))
	}
	return b
}

// Parked answers parked calls (docs/protocol.md 6): Follow the handoff
// requests, Answer on P.answer.<tool>, Confirm on P.approve.<tool>; a
// bridge parks its servers' questions with Ask. It is a value, cheap to
// make and safe for concurrent use.
type Parked struct{ c *Client }

// Parked returns the Client's handle on parked calls.
func (c *Client) Parked() Parked { return Parked{c} }

// Ask is Call on P.ask.<session>, where only a bridge may publish: a
// bridged server's question, an external_only batch of its
// mcp__<server>__elicit (docs/protocol.md 12, 1.17). Its reply id is a
// NewAskID unless an option sets another.
func (p Parked) Ask(ctx context.Context, session string, b bus.Batch, opts ...CallOption) (*bus.Reply, error) {
	opts = append([]CallOption{WithReplyID(NewAskID())}, opts...)
	return p.c.rq.batch(ctx, p.c.subj.Handoffs.Ask(session), session, b, opts)
}

// Answer answers a parked call of tool: an external call's result, or a
// confirmation. It returns nil when accepted, else a *bus.Error
// (bus.ErrNotParked, bus.ErrAlreadyAnswered, ...). An output above
// Config.InlineLimit is stored and sent as references; one above
// Config.MaxOutput is refused (*offload.TooLargeError) and nothing is sent.
func (p Parked) Answer(ctx context.Context, tool, session, replyID, callID string, a bus.Answer) error {
	c := p.c
	if len(a.Output) > 0 {
		if !bus.ValidID(session) || !bus.ValidID(replyID) || !bus.ValidID(callID) {
			return bus.Errorf(bus.CodeBadEvent, "an answer needs valid session, reply and call ids")
		}
		out, err := c.off.Fit(ctx, bus.CallKey(session, replyID, callID), a.Output, 0, a.State == bus.StateError)
		if err != nil {
			return fmt.Errorf("client: answer of %s: %w", callID, err)
		}
		a.Output = out
	}
	return c.rq.sendAnswer(ctx, c.subj.Handoffs.Answer(tool), session, replyID, callID, a, "answer")
}

// Confirm answers a confirm park on the approvers' subject P.approve.<tool>
// (docs/protocol.md 6.3) with a.Confirmed, the parked input's a.InputDigest
// ("input changed" otherwise) and optionally a.Rules among the call's
// suggested_rules; an edited a.Input is refused there.
func (p Parked) Confirm(ctx context.Context, tool, session, replyID, callID string, a bus.Answer) error {
	return p.c.rq.sendAnswer(ctx, p.c.subj.Handoffs.Approve(tool), session, replyID, callID, a, "confirmation")
}

// Tasks is the agent's handle on a session's background tasks
// (docs/protocol.md 5.10) on P.tasks.<session>: a value, cheap to make and
// safe for concurrent use.
type Tasks struct{ c *Client }

// Tasks returns the Client's handle on background tasks.
func (c *Client) Tasks() Tasks { return Tasks{c} }

// Query sends one task verb for session to P.tasks.<session>
// (docs/protocol.md 5.10) and returns the router's reply; a refusal
// (unknown_task, bad_request) is a *bus.Error. A wait's reply comes when
// the tasks ended or q.TimeoutMS passed.
func (t Tasks) Query(ctx context.Context, session string, q bus.TaskQuery) (*bus.TaskReply, error) {
	c := t.c
	var r bus.TaskReply
	wait := 10*time.Second + time.Duration(min(max(q.TimeoutMS, 0), bus.MaxTaskWaitMS))*time.Millisecond
	if err := c.rq.ask(ctx, c.subj.Tasks(session), bus.TypeTaskQuery, session, q, bus.TypeTaskReply, &r, wait); err != nil {
		return nil, err
	}
	return &r, nil
}

// one runs verb op on session's task id: the task (zero when the reply
// has none) and the reply.
func (t Tasks) one(ctx context.Context, session, op, id string) (bus.Task, *bus.TaskReply, error) {
	r, err := t.Query(ctx, session, bus.TaskQuery{Op: op, IDs: []string{id}})
	if err != nil || len(r.Tasks) == 0 {
		return bus.Task{}, nil, err
	}
	return r.Tasks[0], r, nil
}

// Get returns session's task id.
func (t Tasks) Get(ctx context.Context, session, id string) (bus.Task, error) {
	task, _, err := t.one(ctx, session, bus.TaskGet, id)
	return task, err
}

// List lists session's tasks, newest first.
func (t Tasks) List(ctx context.Context, session string) ([]bus.Task, error) {
	return t.list(ctx, session, bus.TaskQuery{Op: bus.TaskList})
}

// list runs q and returns the reply's tasks.
func (t Tasks) list(ctx context.Context, session string, q bus.TaskQuery) ([]bus.Task, error) {
	r, err := t.Query(ctx, session, q)
	if err != nil {
		return nil, err
	}
	return r.Tasks, nil
}

// Wait waits until session's tasks ids all ended (at most timeout,
// bus.MaxTaskWaitMS), and returns them as they are then.
func (t Tasks) Wait(ctx context.Context, session string, timeout time.Duration, ids ...string) ([]bus.Task, error) {
	return t.list(ctx, session, bus.TaskQuery{Op: bus.TaskWait, IDs: ids, TimeoutMS: max(timeout.Milliseconds(), 1)})
}

// Cancel ends session's running task id as interrupted and stops its
// run; a task that ended keeps its end.
func (t Tasks) Cancel(ctx context.Context, session, id string) (bus.Task, error) {
	task, _, err := t.one(ctx, session, bus.TaskCancel, id)
	return task, err
}

// Output returns session's task id with its progress output so far.
func (t Tasks) Output(ctx context.Context, session, id string) (bus.Task, []bus.Block, error) {
	task, r, err := t.one(ctx, session, bus.TaskOutput, id)
	if r == nil {
		return task, nil, err
	}
	return task, r.Output, nil
}

// Output is a stored output opened for reading (protocol 5.9): Read
// returns its bytes and checks their SHA-256 against the reference's at
// the end; Size, MediaType and Digest describe it. Close it when done.
type Output = offload.Object

// Outputs reads stored outputs (docs/protocol.md 5.9) through its Client: a
// value, cheap to make and safe for concurrent use.
type Outputs struct{ c *Client }

// Outputs returns the Client's reader of stored outputs.
func (c *Client) Outputs() Outputs { return Outputs{c} }

// Fetch opens the stored output a data block's url refers to
// (nats-object://<bucket>/<name>#sha256=<digest>), read through the routers on
// P.outputs.<session>, session being the name's first token (FetchSession
// names another). An unknown, expired, other session's or overwritten output
// is an error that says so. Later reads use ctx too.
func (o Outputs) Fetch(ctx context.Context, ref string) (*Output, error) {
	r, err := offload.ParseRef(ref)
	if err != nil {
		return nil, fmt.Errorf("client: fetch: %w", err)
	}
	return o.FetchSession(ctx, r.Session(), ref)
}

// FetchSession is Fetch through P.outputs.<session>.
func (o Outputs) FetchSession(ctx context.Context, session, ref string) (*Output, error) {
	c := o.c
	r, err := offload.ParseRef(ref)
	if err != nil {
		return nil, fmt.Errorf("client: fetch: %w", err)
	}
	if r.Digest == "" {
		return nil, fmt.Errorf("client: fetch: %s has no #sha256=<digest>: give the url exactly as the result has it", ref)
	}
	first, err := c.rq.window(ctx, session, ref, 0)
	if err != nil {
		return nil, fmt.Errorf("client: fetch: %w", err)
	}
	if first.Digest != r.Digest {
		return nil, fmt.Errorf("client: fetch %s: the router served an object with digest %s", ref, first.Digest)
	}
	if ceiling := cmp.Or(max(c.cfg.MaxOutput, 0), offload.DefaultMaxOutput); first.Size > ceiling {
		// Its bytes are hashed only at the end: a size that lies would be read whole.
		return nil, fmt.Errorf("client: fetch %s: the router says it is %d bytes, past the output ceiling (%d)", ref, first.Size, ceiling)
	}
	pending := first.Data
	return offload.NewObject(first.Size, first.MediaType, r.Digest, func(off int64) ([]byte, error) {
		if off == 0 && pending != nil {
			b := pending
			pending = nil
			return b, nil
		}
		ch, err := c.rq.window(ctx, session, ref, off)
		if err != nil {
			return nil, err
		}
		if ch.Size != first.Size || ch.Digest != r.Digest || ch.Offset != off {
			return nil, errors.New("the object changed while it was read")
		}
		return ch.Data, nil
	}), nil
}

// FetchDirect opens a stored output by reading the outputs object store from
// its stream's leader (an operator's read; agents have no access), checking
// the bytes against ref's digest, if any, at the end.
func (o Outputs) FetchDirect(ctx context.Context, ref string) (*Output, error) {
	out, err := offload.NewStore(o.c.nc, o.c.subj.ObjectStore(bus.ObjectOutputs)).Open(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("client: fetch: %w", err)
	}
	return out, nil
}

// FetchBytes reads a whole stored output into memory (Fetch).
func (o Outputs) FetchBytes(ctx context.Context, ref string) ([]byte, error) {
	out, err := o.Fetch(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	b, err := io.ReadAll(out)
	if err != nil {
		return nil, fmt.Errorf("client: fetch %s: %w", ref, err)
	}
	return b, nil
}

// Follow streams the handoff requests (docs/protocol.md 6.2) of kind
// "external" or "confirm" for tool ("" for every tool), oldest first, then new
// ones, through a router-made consumer of P_parked's stream
// (P.handoff.<kind>[.<tool>]); no JetStream permission is needed.
func (p Parked) Follow(ctx context.Context, kind, tool string) (*Events, error) {
	c := p.c
	if kind != "external" && kind != "confirm" {
		return nil, bus.Errorf(bus.CodeBadRequest, "handoff kind %q is not external or confirm", kind)
	}
	if tool != "" && !bus.ValidName(tool) {
		return nil, bus.Errorf(bus.CodeBadRequest, "tool name %q must match ^[A-Za-z0-9_-]{1,64}$", tool)
	}
	f := &follower{c: c, subject: c.subj.Handoffs.Follow(kind, tool), create: bus.TypeHandoffFollow, ready: bus.TypeHandoffReady}
	ev, err := f.start(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: follow %s: %w", c.subj.Handoffs.Follow(kind, tool), err)
	}
	return ev, nil
}
