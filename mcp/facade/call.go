package facade

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/client"
)

// call runs a tools/call as a one-call batch (caller.run), or a 2026-07-28
// call that may ask its host, or its retry (elicit.go).
func (s *session) call(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if req.Params.RequestState != "" {
		return s.confirms.resume(ctx, req)
	}
	if server.IsModernRequest(ctx) && s.confirms.mayElicit(ctx) {
		return s.confirms.callModern(ctx, req)
	}
	return s.calls.run(ctx, req, runOpts{})
}

// caller runs a session's tools/call on the bus: the batch, the wait for a
// parked call with progress, and P.cancel when the MCP request ends first.
type caller struct {
	bus           callBus
	session, user string
	cfg           *Config         // ContextHeader, ParkWait, QuietHold, ProgressEvery
	closing       context.Context // ends when the facade closes (a task's call then goes on)
	list          listFunc        // for a tool's timeout_ms
	mayElicit     func(context.Context) bool
	confirm       func(ctx context.Context, p bus.Parked, replyID string)
}

// callBus is what a call needs of the bus (a fake in parts_test.go).
type callBus interface {
	Watch(ctx context.Context, session string) (events, error)
	Call(ctx context.Context, session string, b bus.Batch, opts ...client.CallOption) (*bus.Reply, error)
	Cancel(ctx context.Context, session, replyID string, calls ...string) error
}

// events is a session's event stream (client.Events).
type events struct {
	C    <-chan *bus.Event
	Stop func()
}

// clientBus is callBus over a client.
type clientBus struct{ *client.Client }

var _ callBus = clientBus{}

func (b clientBus) Watch(ctx context.Context, session string) (events, error) {
	ev, err := b.Client.Watch(ctx, session)
	if err != nil {
		return events{}, err
	}
	return events{C: ev.C, Stop: func() { _ = ev.Stop(context.WithoutCancel(ctx)) }}, nil
}

// listFunc is Facade.list.
type listFunc func(ctx context.Context, session, user, format string) (*bus.ToolsList, error)

// parkFor is how long a parked call is waited for: the tool's timeout
// (or ParkWait when longer), but no longer than QuietHold for a quiet
// host, one with neither a progress token nor a task, which gives up on
// its own (issue 18).
func (c *Config) parkFor(timeout time.Duration, quiet bool) time.Duration {
	wait := max(timeout, c.ParkWait)
	if quiet && wait > c.QuietHold {
		wait = c.QuietHold
	}
	return wait
}

// runOpts are the variations of run.
type runOpts struct {
	// confirm, when set, receives a confirm park; otherwise one is put to
	// the host's user through elicitation when the client declared it.
	confirm chan<- ask
	// callID and replyID, when set, are the bus call's (a task's record
	// names them before the call is sent).
	callID, replyID string
	// keep leaves the bus call running when the facade closes (another
	// facade process learns its end).
	keep         bool
	onPark       func(p bus.Parked, until time.Time)
	onBackground func(bus.TaskHandle) // the call went on as a bus task (tasks.go)
}

// doneWait bounds how long a call answered at once reads its watch for
// its batch's batch.done, forwarding the progress before it.
const doneWait = time.Second

// run runs the call and waits for its result, a parked call on the
// session's events until its deadline (parkFor), sending progress
// notifications (every ProgressEvery while parked) when the client sent a
// token.
func (c *caller) run(ctx context.Context, req mcp.CallToolRequest, o runOpts) (*mcp.CallToolResult, error) {
	start := time.Now()
	input, err := json.Marshal(req.GetArguments())
	if err != nil {
		return nil, err
	}
	if req.GetArguments() == nil {
		input = []byte(`{}`)
	}
	o.callID = cmp.Or(o.callID, "mcp-"+nuid.Next())
	result := func(r bus.Result) *mcp.CallToolResult {
		if h, ok := backgrounded(&r); ok && o.onBackground != nil {
			o.onBackground(h)
		}
		return toMCP(r)
	}
	b := bus.Batch{Calls: []bus.Call{{ID: o.callID, Name: req.Params.Name, Input: input}}}
	if c.user != "" {
		b.User = client.Input(c.user)
	}
	if h, _ := ctx.Value(contextKey).(string); h != "" {
		if !json.Valid([]byte(h)) {
			return mcp.NewToolResultError(fmt.Sprintf("the %s header is not JSON", c.cfg.ContextHeader)), nil
		}
		b.Context = json.RawMessage(h)
	}
	// Watch before calling, so that nothing the call publishes is missed.
	ev, err := c.bus.Watch(ctx, c.session)
	if err != nil {
		return nil, err
	}
	defer ev.Stop()
	replyID := cmp.Or(o.replyID, client.NewReplyID())
	opts := []client.CallOption{client.WithReplyID(replyID)}
	if d, ok := ctx.Deadline(); ok {
		opts = append(opts, client.WithExpiry(d))
	}
	done := make(chan struct{})
	var reply *bus.Reply
	var callErr error
	go func() {
		defer close(done)
		reply, callErr = c.bus.Call(ctx, c.session, b, opts...)
	}()
	var token mcp.ProgressToken
	if req.Params.Meta != nil {
		token = req.Params.Meta.ProgressToken
	}
	quiet := token == nil && req.Params.Task == nil // a host that gives up on its own (parkFor)
	progress := 0
	notify := func(msg string) {
		if token == nil {
			return
		}
		progress++
		params := map[string]any{"progressToken": token, "progress": progress, "message": msg}
		if st, _ := ctx.Value(callStreamKey).(*callStream); st != nil && st.notify(ctx, string(mcp.MethodNotificationProgress), params) {
			return // on the call's own stream (stream.go)
		}
		if srv := server.ServerFromContext(ctx); srv != nil {
			_ = srv.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), params)
		}
	}
	// ended ends run when ctx has ended, whichever way run saw it.
	ended := func() (*mcp.CallToolResult, error) {
		if interruptOnEnd(o.keep, c.closing) {
			interrupt(ctx, c.bus.Cancel, c.session, replyID)
			if done != nil {
				<-done
			}
		}
		return nil, ctx.Err()
	}
	var parked *bus.Parked
	var early *bus.Result // a result event read before the reply
	announced := false    // the host heard of the park from its call.parked event
	doneRead := false     // the batch's batch.done, after its progress
	var wait, tick <-chan time.Time
	var deadline time.Time
	for {
		select {
		case <-ctx.Done():
			return ended()
		case <-done:
			done = nil
			if callErr != nil && ctx.Err() != nil {
				// client.Call ended because ctx did: the bus call still runs
				// (TestCancelInterruptsBusCall).
				return ended()
			}
			if callErr != nil {
				return mcp.NewToolResultError("Error: " + callErr.Error()), nil
			}
			if len(reply.Results) > 0 && token != nil && !doneRead {
				// Answered: the call's call.parked event and progress still
				// reach the host, before the result. The router publishes
				// them before the batch's batch.done, on the subject the
				// watch reads, so the watch is read up to it (its goroutine
				// may be behind the reply's); at most doneWait
				// (TestCallsAtOnceProgress).
				until := time.NewTimer(doneWait)
				defer until.Stop()
			drain:
				for {
					select {
					case e, ok := <-ev.C:
						switch {
						case !ok || e.Type == bus.TypeBatchDone && e.ReplyID == replyID:
							break drain
						case e.Type == bus.TypeCallParked && e.ReplyID == replyID && !announced:
							announced = announceParked(e, b.Calls[0].ID, notify)
						case e.Type == bus.TypeCallProgress && e.ReplyID == replyID && e.ToolCallID == b.Calls[0].ID:
							notifyProgress(e, notify)
						}
					case <-until.C:
						break drain
					case <-ctx.Done():
						break drain
					}
				}
			}
			if len(reply.Results) > 0 {
				return result(reply.Results[0]), nil
			}
			if len(reply.Parked) == 0 {
				return nil, fmt.Errorf("facade: empty reply")
			}
			parked = &reply.Parked[0]
			if early != nil {
				// Answered before the reply came in: the host still
				// hears that the call parked.
				if !announced {
					notify(fmt.Sprintf("waited for %s on %s", kindText(parked.Kind), parked.Subject))
				}
				return result(*early), nil
			}
			deadline = start.Add(c.cfg.parkFor(c.timeout(ctx, req.Params.Name), quiet))
			if o.onPark != nil {
				o.onPark(*parked, deadline)
			}
			if parked.Kind == "confirm" && o.confirm != nil {
				o.confirm <- ask{Park: *parked, ReplyID: replyID, deadline: deadline}
			} else if parked.Kind == "confirm" && c.mayElicit(ctx) {
				ectx, stop := context.WithCancel(ctx)
				var elicit sync.WaitGroup
				elicit.Go(func() { c.confirm(ectx, *parked, replyID) })
				defer func() { stop(); elicit.Wait() }()
			}
			notify(fmt.Sprintf("waiting for %s on %s until %s", kindText(parked.Kind), parked.Subject, deadline.UTC().Format(time.RFC3339)))
			t := time.NewTimer(time.Until(deadline))
			defer t.Stop()
			wait = t.C
			p := time.NewTicker(c.cfg.ProgressEvery)
			defer p.Stop()
			tick = p.C
		case <-tick:
			notify(fmt.Sprintf("still waiting for %s on %s (%s left)", kindText(parked.Kind), parked.Subject,
				time.Until(deadline).Round(time.Second)))
		case <-wait:
			if quiet {
				return mcp.NewToolResultError(stillParkedText(b.Calls[0].ID, req.Params.Name, parked.Kind, parked.Subject, replyID, c.session)), nil
			}
			return mcp.NewToolResultError(fmt.Sprintf("The call %s of tool %s is still parked (%s) after its deadline (%s): answer it on %s (reply id %s, session %s).",
				b.Calls[0].ID, req.Params.Name, parked.Kind, deadline.Sub(start).Round(time.Millisecond), parked.Subject, replyID, c.session)), nil
		case e, ok := <-ev.C:
			if !ok && ctx.Err() != nil {
				return ended() // the watch ended with ctx, before ctx.Done was picked
			}
			if !ok {
				return nil, fmt.Errorf("facade: events ended")
			}
			if e.ReplyID != replyID {
				continue
			}
			if e.Type == bus.TypeCallParked && parked == nil && !announced {
				// The park, seen before the reply: an answer may finish
				// the call before the reply says it parked.
				announced = announceParked(e, b.Calls[0].ID, notify)
				continue
			}
			if e.Type == bus.TypeBatchDone {
				doneRead = true
				continue
			}
			if e.ToolCallID != b.Calls[0].ID {
				continue
			}
			switch e.Type {
			case bus.TypeCallProgress:
				notifyProgress(e, notify)
			case bus.TypeCallResult:
				var r bus.Result
				if err := e.DataAs(&r); err != nil {
					return nil, err
				}
				if parked != nil {
					return result(r), nil
				}
				early = &r
			}
		}
	}
}

// notifyProgress tells the host of e, a call.progress event.
func notifyProgress(e *bus.Event, notify func(string)) {
	var p bus.Progress
	if e.DataAs(&p) == nil {
		notify(blocksText(p.Output))
	}
}

// announceParked tells the host that call id parked when e (a
// call.parked event) names it; it reports whether it did.
func announceParked(e *bus.Event, id string, notify func(string)) bool {
	var pe bus.ParkedEvent
	if e.DataAs(&pe) != nil {
		return false
	}
	for _, p := range pe.Calls {
		if p.ID == id {
			notify(fmt.Sprintf("waiting for %s on %s", kindText(p.Kind), p.Subject))
			return true
		}
	}
	return false
}

// interruptOnEnd reports whether a call whose context ended is interrupted
// on the bus: always, but for a kept call (a task's) when the facade closes.
func interruptOnEnd(keep bool, closing context.Context) bool {
	return !keep || closing.Err() == nil
}

// interrupt cancels the bus call of replyID (P.cancel, docs/protocol.md 5.4)
// whose MCP request ended, with a context of its own since ctx has ended.
func interrupt(ctx context.Context, cancel func(ctx context.Context, session, replyID string, calls ...string) error, session, replyID string) {
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	_ = cancel(cctx, session, replyID)
}

// holds returns how long a call of req may last and how long one request
// of it is held (parkFor).
func (c *caller) holds(ctx context.Context, req mcp.CallToolRequest) (call, request time.Duration) {
	t := c.timeout(ctx, req.Params.Name)
	quiet := (req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil) && req.Params.Task == nil
	return c.cfg.parkFor(t, false), c.cfg.parkFor(t, quiet)
}

// timeout is the tool's timeout_ms in the user's listing;
// bus.DefaultTimeoutMS when the listing fails or lacks the tool.
func (c *caller) timeout(ctx context.Context, name string) time.Duration {
	ms := int64(bus.DefaultTimeoutMS)
	if list, err := c.list(ctx, c.session, c.user, bus.FormatToolbus); err == nil {
		for _, raw := range list.Tools {
			var d bus.ToolDef
			if json.Unmarshal(raw, &d) == nil && d.Name == name && d.TimeoutMS > 0 {
				ms = d.TimeoutMS
			}
		}
	}
	return time.Duration(ms) * time.Millisecond
}

func kindText(kind string) string {
	if kind == "confirm" {
		return "a confirmation"
	}
	return "an answer"
}

// blocksText joins the non-empty text blocks of bs, a line each.
func blocksText(bs []bus.Block) string {
	var parts []string
	for _, b := range bs {
		if b.Type == bus.BlockText && b.Text != "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// toMCP maps a bus result to an MCP result: text blocks to text, data
// blocks to images, audio or embedded resources (by URL: resource links),
// every state but success to isError.
func toMCP(r bus.Result) *mcp.CallToolResult {
	res := &mcp.CallToolResult{Content: []mcp.Content{}, IsError: r.State != bus.StateSuccess}
	hasText := slices.ContainsFunc(r.Output, func(b bus.Block) bool { return b.Type == bus.BlockText })
	for _, b := range r.Output {
		switch {
		case b.Type == bus.BlockText && b.URI != "":
			// An embedded text resource keeps its URI (docs/mcp.md).
			res.Content = append(res.Content, withAnnotations(mcp.NewEmbeddedResource(
				mcp.TextResourceContents{URI: b.URI, MIMEType: b.MediaType, Text: b.Text}), b.Annotations))
		case b.Type == bus.BlockText:
			res.Content = append(res.Content, withAnnotations(mcp.NewTextContent(b.Text), b.Annotations))
		case b.URL != "":
			link := mcp.NewResourceLink(b.URL, cmp.Or(b.Name, b.URL), linkDescription(b), b.MediaType)
			link.Title = b.Title
			if b.Size > 0 {
				link.Size = &b.Size
			}
			res.Content = append(res.Content, withAnnotations(link, b.Annotations))
		case isStructured(b) && res.StructuredContent == nil:
			// The tool's structured output, and its JSON as text when the
			// result has none, for hosts that ignore structuredContent.
			raw, _ := base64.StdEncoding.DecodeString(b.Data)
			res.StructuredContent = json.RawMessage(raw)
			if !hasText {
				res.Content = append(res.Content, mcp.NewTextContent(string(raw)))
			}
		case strings.HasPrefix(b.MediaType, "image/"):
			res.Content = append(res.Content, withAnnotations(mcp.NewImageContent(b.Data, b.MediaType), b.Annotations))
		case strings.HasPrefix(b.MediaType, "audio/"):
			res.Content = append(res.Content, withAnnotations(mcp.NewAudioContent(b.Data, b.MediaType), b.Annotations))
		default:
			uri := cmp.Or(b.URI, "toolbus:"+r.ID)
			res.Content = append(res.Content, withAnnotations(mcp.NewEmbeddedResource(mcp.BlobResourceContents{URI: uri, MIMEType: b.MediaType, Blob: b.Data}), b.Annotations))
		}
	}
	if h, ok := backgrounded(&r); ok {
		// Not a failure: the call goes on as a bus task, this is its
		// handle (tasks.go).
		res.IsError, res.Meta = false, mcp.NewMetaFromMap(map[string]any{HandleMetaKey: h})
	}
	return res
}

// ReadOutputTool is the built-in tool that reads a part of a stored
// output (docs/protocol.md 11).
const ReadOutputTool = "read_output"

// linkDescription is a resource link's description: the block's own, else
// what it is and how to read it (issue 29, F3).
func linkDescription(b bus.Block) string {
	if b.Description != "" {
		return b.Description
	}
	size := "size unknown"
	if b.Size > 0 {
		size = fmt.Sprintf("%d bytes", b.Size)
	}
	if ref, err := offload.ParseRef(b.URL); err == nil {
		digest := ""
		if ref.Digest != "" {
			digest = ", sha256 " + ref.Digest
		}
		return fmt.Sprintf("Tool output stored by toolbus (%s%s), too large to send inline. Read it whole with resources/read "+
			"on this URI, or a part with the %s tool ({\"ref\": this URI, \"offset\" or \"line\", \"limit\"}).", size, digest, ReadOutputTool)
	}
	return fmt.Sprintf("A resource (%s): read it with resources/read on this URI.", size)
}

// isStructured reports whether b is a structured output: inline JSON
// without a resource URI (the bridge's structuredContent, docs/mcp.md).
func isStructured(b bus.Block) bool {
	mt, _, _ := strings.Cut(b.MediaType, ";")
	if b.Type != bus.BlockData || strings.TrimSpace(mt) != "application/json" || b.Data == "" || b.URI != "" {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(b.Data)
	return err == nil && json.Valid(raw)
}

// withAnnotations sets a bus block's annotations on MCP content.
func withAnnotations[C mcp.Content](c C, a *bus.Annotations) mcp.Content {
	ann := mcpAnnotations(a) // nil when a is
	switch x := any(&c).(type) {
	case *mcp.TextContent:
		x.Annotations = ann
	case *mcp.ImageContent:
		x.Annotations = ann
	case *mcp.AudioContent:
		x.Annotations = ann
	case *mcp.ResourceLink:
		x.Annotations = ann
	case *mcp.EmbeddedResource:
		x.Annotations = ann
	}
	return c
}

// stillParkedText tells the model of a quiet host that its call is
// waiting on the bus, not lost, and how it goes on.
func stillParkedText(callID, tool, kind, subject, replyID, session string) string {
	return fmt.Sprintf("The call %s of tool %s is still waiting for %s. It stays parked on the bus and runs "+
		"as soon as someone answers it (toolbus parked lists it; the answer goes to %s, reply id %s, session %s); "+
		"its result then appears in the session's events. Do not call the tool again for this: tell the user "+
		"what is waiting, and carry on with what does not depend on it.", callID, tool, kindText(kind), subject, replyID, session)
}

// structurer gives the result of a tool listed with an outputSchema its
// structuredContent (docs/mcp.md, "a tool listed with an outputSchema returns
// structured content"): a lone text block's JSON object, or an offloaded
// output's object read back up to max bytes; a larger or non-object output
// becomes an isError result saying where the output is.
type structurer struct {
	session string
	fetch   outputFetcher
	max     int64
}

func (st structurer) wrap(h server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := h(ctx, req)
		if err != nil || res == nil || handleWithoutSchema(res) || res.IsError || res.StructuredContent != nil || len(res.RawStructuredContent) > 0 {
			return res, err
		}
		if !structureText(res) {
			st.restore(ctx, res)
		}
		return res, nil
	}
}

// restore sets res.StructuredContent from a stored output it links to; when
// none serves, a result with stored links becomes an isError saying why.
func (st structurer) restore(ctx context.Context, res *mcp.CallToolResult) {
	var links []mcp.ResourceLink
	for _, c := range res.Content {
		if l, ok := c.(mcp.ResourceLink); ok && st.ours(l.URI) {
			links = append(links, l)
		}
	}
	if len(links) == 0 {
		return // not offloaded: as the tool returned it
	}
	var why []string
	for _, l := range links {
		if !jsonish(l.MIMEType) {
			continue
		}
		raw, _, err := readStored(ctx, st.fetch, st.session, l.URI, st.max, "inline")
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) > 0 && raw[0] == '{' && json.Valid(raw) {
			res.StructuredContent = json.RawMessage(raw)
			return
		}
		why = append(why, fmt.Sprintf("%s is not a JSON object", l.URI))
	}
	if len(why) == 0 {
		why = append(why, "no stored part of it is JSON")
	}
	res.IsError = true
	note := "The tool's output was too large to send inline and was stored; it cannot be returned as the structured " +
		"content its output schema describes (" + strings.Join(why, "; ") + "). The call succeeded: the parts below " +
		"are previews and links; read any range of a stored part with the " + ReadOutputTool + " tool, or whole with resources/read."
	res.Content = append([]mcp.Content{mcp.NewTextContent(note)}, res.Content...)
}

func (st structurer) ours(uri string) bool {
	r, err := offload.ParseRef(uri)
	return err == nil && r.Session() == st.session && r.Digest != ""
}

// jsonish reports whether a stored part may hold the JSON object: JSON,
// or plain text (a worker's typed output, stored as text/plain).
func jsonish(media string) bool {
	mt, _, err := mime.ParseMediaType(media)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "text/plain"
}

// structureText sets res.StructuredContent from its one text block when
// that holds a JSON object, and reports whether it did.
func structureText(res *mcp.CallToolResult) bool {
	if len(res.Content) != 1 {
		return false
	}
	tc, ok := res.Content[0].(mcp.TextContent)
	raw := bytes.TrimSpace([]byte(tc.Text))
	if !ok || len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
		return false
	}
	res.StructuredContent = json.RawMessage(raw)
	return true
}

// Revision downgrade: docs/mcp.md "Revision downgrade" has the table.

// revision orders the MCP revisions; an unknown or empty version is taken
// as the newest (mcp-go negotiates only the ones it knows).
type revision int

const (
	rev20241105 revision = iota
	rev20250326
	rev20250618
	rev20251125
	revLatest
)

var revisionsByVersion = map[string]revision{mcp.ProtocolVersion20241105: rev20241105, mcp.ProtocolVersion20250326: rev20250326,
	mcp.ProtocolVersion20250618: rev20250618, mcp.ProtocolVersion20251125: rev20251125}

func revisionOf(version string) revision {
	if r, ok := revisionsByVersion[version]; ok {
		return r
	}
	return revLatest
}

func revisionFrom(ctx context.Context) revision {
	return revisionOf(server.RequestProtocolVersion(ctx))
}

// downgradeTools returns tools as a host at rev can read them.
func downgradeTools(rev revision, tools []mcp.Tool) []mcp.Tool {
	if rev >= rev20251125 {
		return tools
	}
	out := make([]mcp.Tool, len(tools))
	for i, t := range tools {
		t.Execution, t.Icons = nil, nil
		if rev < rev20250618 {
			t.Title, t.RawOutputSchema, t.OutputSchema, t.Meta = "", nil, mcp.ToolOutputSchema{}, nil
		}
		if rev < rev20250326 {
			// mcp-go always writes "annotations"; empty it is {}.
			t.Annotations = mcp.ToolAnnotation{}
		}
		out[i] = t
	}
	return out
}

// downgradeResult returns res as a host at rev can read it (the table
// above; resource links and audio become text naming them).
func downgradeResult(rev revision, res *mcp.CallToolResult) *mcp.CallToolResult {
	if res == nil || rev >= rev20250618 {
		return res
	}
	out := *res
	out.StructuredContent = nil
	out.Content = make([]mcp.Content, 0, len(res.Content))
	for _, c := range res.Content {
		out.Content = append(out.Content, downgradeContent(rev, c))
	}
	return &out
}

func downgradeContent(rev revision, c mcp.Content) mcp.Content {
	switch x := c.(type) {
	case mcp.ResourceLink:
		return withOldAnnotations(mcp.NewTextContent(linkText(x)), x.Annotations)
	case mcp.AudioContent:
		if rev < rev20250326 {
			return withOldAnnotations(mcp.NewTextContent(fmt.Sprintf("[audio (%s, about %d bytes) left out: this MCP revision has no audio content]",
				x.MIMEType, base64.StdEncoding.DecodedLen(len(x.Data)))), x.Annotations)
		}
		x.Annotations, x.Meta = oldAnnotations(x.Annotations), nil
		return x
	case mcp.TextContent:
		x.Annotations, x.Meta = oldAnnotations(x.Annotations), nil
		return x
	case mcp.ImageContent:
		x.Annotations, x.Meta = oldAnnotations(x.Annotations), nil
		return x
	case mcp.EmbeddedResource:
		x.Annotations, x.Meta = oldAnnotations(x.Annotations), nil
		return x
	}
	return c
}

// linkText names a resource link for a host that has no resource_link;
// the URI stands between spaces, so it is copied whole.
func linkText(l mcp.ResourceLink) string {
	var parts []string
	if l.Name != "" && l.Name != l.URI {
		parts = append(parts, fmt.Sprintf("name %q", l.Name))
	}
	if l.MIMEType != "" {
		parts = append(parts, l.MIMEType)
	}
	if l.Size != nil {
		parts = append(parts, fmt.Sprintf("%d bytes", *l.Size))
	}
	s := "[resource " + l.URI
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	if l.Description != "" {
		s += " — " + l.Description
	}
	return s + " — read it with resources/read]"
}

// oldAnnotations keeps what 2024-11-05 to 2025-03-26 define.
func oldAnnotations(a *mcp.Annotations) *mcp.Annotations {
	if a == nil || (len(a.Audience) == 0 && a.Priority == nil) {
		return nil
	}
	return &mcp.Annotations{Audience: a.Audience, Priority: a.Priority}
}

func withOldAnnotations(t mcp.TextContent, a *mcp.Annotations) mcp.TextContent {
	t.Annotations = oldAnnotations(a)
	return t
}

// downgradeInit takes away the tasks capability before 2025-11-25, and
// elicitation at every revision: it is a client capability (F4).
func downgradeInit(res *mcp.InitializeResult) {
	if res == nil {
		return
	}
	res.Capabilities.Elicitation = nil
	if revisionOf(res.ProtocolVersion) < rev20251125 {
		res.Capabilities.Tasks = nil
	}
}

func downgradeResources(rev revision, rs []mcp.Resource, ts []mcp.ResourceTemplate) {
	if rev >= rev20250618 {
		return
	}
	old := func(title *string, meta **mcp.Meta, a *mcp.Annotated) {
		*title, *meta, a.Annotations = "", nil, oldAnnotations(a.Annotations)
	}
	for i := range rs {
		old(&rs[i].Title, &rs[i].Meta, &rs[i].Annotated)
	}
	for i := range ts {
		old(&ts[i].Title, &ts[i].Meta, &ts[i].Annotated)
	}
}

// downgradeMiddleware applies downgradeResult to every tools/call result.
func downgradeMiddleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := next(ctx, req)
		if err != nil {
			return res, err
		}
		return downgradeResult(revisionFrom(ctx), res), nil
	}
}
