// Package client is the agent's side of toolbus: call a batch of tools,
// list the tools a session's model may see, stream a session's events,
// cancel calls, answer parked calls and run admin verbs.
package client

import (
	"context"
	"encoding/json"
	"fmt"
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
	// Source is the CloudEvents source of the agent; "" means
	// "toolbus/client".
	Source string
	// Timeout bounds requests whose context has no deadline; zero means
	// 10 minutes for calls and 10 seconds for everything else.
	Timeout time.Duration
	// InlineLimit is the encoded size of an answer's output above which its
	// largest blocks are stored in the outputs object store and sent as
	// references (docs/protocol.md 5.9); zero means 1 MiB, and the payload
	// limit (less 64 KiB) caps it.
	InlineLimit int
	// MaxOutput is the encoded size of an answer's output above which
	// Parked().Answer refuses it, sending and storing nothing; zero means 64 MiB.
	MaxOutput int64
}

// Client talks to the routers of one deployment. It is safe for concurrent use.
//
// Its exported methods are the agent's verbs of the protocol, one each;
// the verbs of parked calls, stored outputs and background tasks are on
// the handles Parked, Outputs and Tasks return (docs/client.md says why).
// What they share, making and sending an event and reading the reply, is
// the requester's (request.go).
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
	if cfg.Source == "" {
		cfg.Source = "toolbus/client"
	}
	subj := bus.NewSubjects(cfg.Prefix)
	// offload.New fails only on bad jetstream options, and passes none.
	off, _ := offload.New(nc, subj.ObjectStore(bus.ObjectOutputs), offload.Limits{Inline: max(cfg.InlineLimit, 0), Max: max(cfg.MaxOutput, 0)})
	return &Client{nc: nc, subj: subj, cfg: cfg, off: off,
		rq: &requester{nc: nc, subj: subj, source: cfg.Source, timeout: cfg.Timeout}}
}

// Dial connects with conn (natsconn.FromEnv() reads the nats CLI's
// environment: URLs, credentials, TLS, inbox prefix) and returns a Client
// on that connection; Close closes it.
//
//	cl, err := client.Dial(natsconn.FromEnv(), client.Config{Source: "my-agent"})
func Dial(conn natsconn.Config, cfg Config) (*Client, error) {
	name := cfg.Source
	if name == "" {
		name = "toolbus/client"
	}
	nc, err := conn.Connect(name)
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

// Call sends one model turn's calls and waits for the reply: finished
// results and parked calls. A rejected batch returns a *bus.Error
// (errors.Is(err, bus.ErrBadRequest) etc).
func (c *Client) Call(ctx context.Context, session string, b bus.Batch, opts ...CallOption) (*bus.Reply, error) {
	e, err := c.rq.batchEvent(session, b, opts)
	if err != nil {
		return nil, err
	}
	var reply bus.Reply
	if err := c.rq.request(ctx, c.subj.Call(session), e, bus.TypeCallReply, &reply, 10*time.Minute); err != nil {
		return nil, err
	}
	c.rq.revs.saw(session, reply.SessionRev)
	return &reply, nil
}

// Publish sends a batch without waiting; results arrive as events on the
// session's events subject. It returns the reply id.
func (c *Client) Publish(session string, b bus.Batch, opts ...CallOption) (string, error) {
	e, err := c.rq.batchEvent(session, b, opts)
	if err != nil {
		return "", err
	}
	return e.ID, bus.Publish(c.nc, c.subj.Call(session), e)
}

// Tools asks which tools the session's model sees, in format (bus.Format*;
// "" means toolbus), with an optional request-scoped configuration.
func (c *Client) Tools(ctx context.Context, session, format string, req *bus.Request) (*bus.ToolsList, error) {
	return c.Query(ctx, session, bus.ToolsQuery{Request: req, Format: format})
}

// Query is Tools with the whole query: a user (docs/protocol.md 4.1: it selects
// the user's skills) as well as the format and request.
func (c *Client) Query(ctx context.Context, session string, q bus.ToolsQuery) (*bus.ToolsList, error) {
	e, err := c.rq.event(bus.TypeToolsQuery, session, q)
	if err != nil {
		return nil, err
	}
	var list bus.ToolsList
	if err := c.rq.request(ctx, c.subj.Tools(session), e, bus.TypeToolsList, &list, 10*time.Second); err != nil {
		return nil, err
	}
	c.rq.revs.saw(session, list.SessionRev)
	return &list, nil
}

// Cancel interrupts the calls of reply id (all of them when calls is empty).
func (c *Client) Cancel(ctx context.Context, session, replyID string, calls ...string) error {
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
	e, err := c.rq.event(bus.TypeAdmin, session, data)
	if err != nil {
		return err
	}
	return c.rq.request(ctx, c.subj.Admin(verb), e, bus.TypeAdminReply, out, 10*time.Second)
}

// Events is a stream of a session's events.
type Events struct {
	C    <-chan *bus.Event
	c    chan *bus.Event
	stop context.CancelFunc
	done chan struct{} // closed with C
}

func newEvents(cancel context.CancelFunc) *Events {
	ch := make(chan *bus.Event, 1024)
	return &Events{C: ch, c: ch, stop: cancel, done: make(chan struct{})}
}

// end closes C; the producer's last step.
func (s *Events) end() {
	close(s.c)
	close(s.done)
}

// Stop ends the stream and waits until C is closed, or until ctx ends
// (then it returns ctx's error; C is still closed soon). It is safe to
// call twice.
func (s *Events) Stop(ctx context.Context) error {
	s.stop()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("client: events stop: %w", ctx.Err())
	}
}

// Watch streams the session's events as they are published (session "*"
// streams every session's). The stream is live from the moment Watch
// returns; use Replay to read what was published before.
func (c *Client) Watch(ctx context.Context, session string) (*Events, error) {
	if session != "*" && !bus.ValidID(session) {
		return nil, bus.Errorf(bus.CodeBadEvent, "session id %q is not valid", session)
	}
	msgs := make(chan *nats.Msg, 1024)
	sub, err := c.nc.ChanSubscribe(c.subj.Events(session), msgs)
	if err != nil {
		return nil, fmt.Errorf("client: watch: %w", err)
	}
	if err := bus.Flush(ctx, c.nc); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("client: watch: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	ev := newEvents(cancel)
	ch := ev.c
	go func() {
		defer ev.end()
		defer func() { _ = sub.Unsubscribe() }()
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-msgs:
				e, err := bus.Decode(m)
				if err != nil {
					continue
				}
				select {
				case ch <- e:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ev, nil
}

// Replay streams the session's events kept by the events stream, from the
// first one still kept, then live ones: through the pull consumer a router
// makes for the session on request (P.replay.<session>, docs/protocol.md
// 3.4), pulled through the router (io.toolbus.consumer.next) and made again
// from the next sequence when it is lost (a node's restart); or, for every
// session ("*", the operator's), an ordered consumer of its own.
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
	ctx, cancel := context.WithCancel(ctx)
	ev := newEvents(cancel)
	ch := ev.c
	cons, err := js.OrderedConsumer(ctx, c.subj.Stream(bus.StreamEvents), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{c.subj.Events(session)}})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("client: replay: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		e, err := bus.Decode(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
		if err != nil {
			return
		}
		select {
		case ch <- e:
		case <-ctx.Done():
		}
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("client: replay: %w", err)
	}
	go func() {
		<-ctx.Done()
		cc.Stop()
		<-cc.Closed()
		ev.end()
	}()
	return ev, nil
}

// IsStored reports whether a block is a reference to a stored output.
func IsStored(b bus.Block) bool {
	return b.Type == bus.BlockData && strings.HasPrefix(b.URL, offload.Scheme+"://")
}

// NewReplyID returns a fresh reply id.
func NewReplyID() string { return nuid.Next() }

// Input marshals v as a call input.
func Input(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("client: input: %v", err))
	}
	return b
}
