package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/private"
)

// cancelGrace bounds sending the cancel of an interrupted call, and is the
// time the router is given past --timeout to report the timeout itself.
const cancelGrace = 3 * time.Second

func runCall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("call", stderr)
	replyID := fs.String("reply-id", "", "reply id of the batch; re-sending one is deduplicated (default: a fresh id)")
	timeout := fs.Duration("timeout", 0, "deadline of the call (its expirytime); 0 means the tool's own timeout")
	asJSON := fs.Bool("json", false, "print the reply (or the rejection) as JSON")
	wait := fs.Bool("wait", false, "when a call parks, wait for its result (an answer or a confirmation from anywhere) and print it")
	batchFile := fs.String("batch", "", "run several calls at once: a JSON file ('-' for stdin) holding {\"calls\": [{\"id\", \"name\", \"input\"}...]} or the array of calls")
	user := fs.String("user", "", "the batch's runtime user (a string, or JSON); refused by a secured router unless it is the credentials' own")
	rctx := fs.String("context", "", "the batch's runtime context, as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *replyID, err = cn.replyID(fs, *replyID); err != nil {
		return err
	}
	if *timeout < 0 {
		return usageError(fs, "--timeout must not be negative")
	}
	batch, err := callBatch(fs, pos, *batchFile, *replyID)
	if err != nil {
		return err
	}
	batch.User = jsonOrString(*user)
	if *rctx != "" {
		if !json.Valid([]byte(*rctx)) {
			return usageError(fs, "--context %q is not JSON", *rctx)
		}
		batch.Context = json.RawMessage(*rctx)
	}

	cl, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	// With --wait, progress and re-parked calls are printed on stderr as they come.
	fol, stop, err := follow(ctx, cl, cn.session, *replyID, len(batch.Calls), stderr, *wait)
	if err != nil {
		return err
	}
	defer stop()
	opts := []client.CallOption{client.WithReplyID(*replyID)}
	callCtx := ctx
	if *timeout > 0 {
		opts = append(opts, client.WithExpiry(time.Now().Add(*timeout)))
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, *timeout+cancelGrace)
		defer cancel()
	}
	reply, err := cl.Call(callCtx, cn.session, batch, opts...)
	if err != nil {
		return callError(ctx, cl, cn.session, *replyID, err, *asJSON, stdout)
	}
	if *wait && len(reply.Parked) > 0 {
		if !*asJSON {
			renderReply(stdout, reply, cn.session, *replyID)
			fmt.Fprintf(stdout, "waiting for %d parked call(s)...\n", len(reply.Parked))
		}
		late, err := fol.await(ctx, reply.Parked)
		if err != nil {
			return callError(ctx, cl, cn.session, *replyID, err, *asJSON, stdout)
		}
		if !*asJSON {
			for _, r := range late {
				renderResult(stdout, r)
			}
			return replyError(&bus.Reply{Results: late})
		}
		reply = &bus.Reply{Results: append(reply.Results, late...), Parked: []bus.Parked{}}
	}
	if *asJSON {
		err = cli.WriteJSON(stdout, reply)
	} else {
		renderReply(stdout, reply, cn.session, *replyID)
		suggestTools(ctx, cl, cn.session, reply, stderr)
	}
	return cmp.Or(err, replyError(reply))
}

// callBatch builds the batch: one call from the positional tool and input
// ('-' for stdin, '@FILE'), or --batch's calls. A call without an id gets one
// made from the reply id, so a re-send with --reply-id is the same call.
func callBatch(fs *flag.FlagSet, pos []string, batchFile, replyID string) (bus.Batch, error) {
	var b bus.Batch
	switch {
	case batchFile != "" && len(pos) != 0:
		return b, usageError(fs, "call takes either --batch or a tool and its input, not both")
	case batchFile != "":
		raw, err := readInput(batchFile, os.Stdin)
		if err != nil {
			return b, err
		}
		into := any(&b) // {"calls": [...]}, or the array of calls
		if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
			into = &b.Calls
		}
		if err := json.Unmarshal(raw, into); err != nil {
			return b, usageError(fs, "--batch %s: not a batch: %v", batchFile, err)
		}
		if len(b.Calls) == 0 {
			return b, usageError(fs, "--batch %s holds no calls", batchFile)
		}
	case len(pos) < 1 || len(pos) > 2:
		return b, usageError(fs, "call takes a tool name and an optional JSON input, got %d arguments", len(pos))
	default:
		input := "{}"
		if len(pos) == 2 {
			input = pos[1]
		}
		raw, err := inputArg(input)
		if err != nil {
			return b, err
		}
		if !json.Valid(raw) {
			return b, usageError(fs, "input %q is not JSON", short(string(raw)))
		}
		b.Calls = []bus.Call{{Name: pos[0], Input: raw}}
	}
	for i := range b.Calls {
		c := &b.Calls[i]
		if !bus.ValidName(c.Name) {
			return b, usageError(fs, "tool name %q must match ^[A-Za-z0-9_-]{1,64}$", c.Name)
		}
		c.ID = cmp.Or(c.ID, callIDFor(replyID, i, len(b.Calls)))
	}
	return b, nil
}

// callIDFor is the id of call i of n in a CLI batch with reply id replyID.
func callIDFor(replyID string, i, n int) string {
	id := "call-" + replyID
	if n > 1 {
		id += fmt.Sprintf("-%d", i+1)
	}
	if len(id) > 128 {
		id = id[len(id)-128:]
	}
	return id
}

// inputArg reads an input argument: '-' is standard input, '@FILE' a file,
// anything else the JSON itself.
func inputArg(arg string) ([]byte, error) {
	if name, file := strings.CutPrefix(arg, "@"); file || arg == "-" {
		return readInput(name, os.Stdin)
	}
	return []byte(arg), nil
}

// jsonOrString returns v as a JSON value: itself when it is JSON (an
// object, a number ...), else as a string; "" is no value.
func jsonOrString(v string) json.RawMessage {
	if v == "" {
		return nil
	}
	if json.Valid([]byte(v)) && strings.ContainsAny(v[:1], "{[\"0123456789-tfn") {
		return json.RawMessage(v)
	}
	return client.Input(v) // a string always encodes
}

// callError explains a call that got no reply (a *bus.Error as JSON with
// asJSON); when the user interrupted, the reply's calls are cancelled too.
func callError(ctx context.Context, cl *client.Client, session, replyID string, err error, asJSON bool, stdout io.Writer) error {
	if be, ok := errors.AsType[*bus.Error](err); ok {
		if asJSON {
			_ = cli.WriteJSON(stdout, be)
		}
		return fmt.Errorf("batch rejected: %s: %s", be.Code, be.Message)
	}
	if ctx.Err() != nil {
		cctx, cancel := context.WithTimeout(context.Background(), cancelGrace)
		defer cancel()
		if cerr := cl.Cancel(cctx, session, replyID); cerr != nil {
			return fmt.Errorf("interrupted; cancelling reply %s failed: %w", replyID, cerr)
		}
		return fmt.Errorf("interrupted; the calls of reply %s were cancelled", replyID)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no reply for reply %s in time: %w", replyID, err)
	}
	return err
}

// replyError returns an error naming every result that is not a success;
// without one, calls still parked are a parkedError (exit status 3): they
// are no failure, but wait for an answer.
func replyError(r *bus.Reply) error {
	var errs []error
	for _, res := range r.Results {
		if res.State == bus.StateSuccess {
			continue
		}
		code := ""
		if res.Error != nil {
			code = " (" + res.Error.Code + ")"
		}
		errs = append(errs, fmt.Errorf("call %s of %s ended %s%s", res.ID, res.Name, res.State, code))
	}
	if len(errs) == 0 && len(r.Parked) > 0 {
		return &parkedError{n: len(r.Parked)}
	}
	return errors.Join(errs...)
}

// suggestTools prints "did you mean" for each unknown-tool result of r, from
// the session's listing (a failed listing only loses the hint).
func suggestTools(ctx context.Context, cl *client.Client, session string, r *bus.Reply, w io.Writer) {
	var unknown []string
	for _, res := range r.Results {
		if res.Error != nil && res.Error.Code == bus.CodeUnknownTool && !slices.Contains(unknown, res.Name) {
			unknown = append(unknown, res.Name)
		}
	}
	if len(unknown) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	list, err := cl.Tools(ctx, session, "", nil)
	if err != nil {
		return
	}
	var names []string
	for _, raw := range list.Tools {
		if name, _ := toolEntry(raw); name != "" && name != "?" {
			names = append(names, name)
		}
	}
	for _, name := range unknown {
		if near := nearest(name, names); len(near) > 0 {
			fmt.Fprintf(w, "no tool %q: did you mean %s? (toolbus tools lists them)\n", name, strings.Join(near, " or "))
		} else {
			fmt.Fprintf(w, "no tool %q in session %s (toolbus tools lists them)\n", name, session)
		}
	}
}

// nearest returns the names closest to name (case-insensitive edit
// distance at most a third of its length, at least 2), best first, at most 3.
func nearest(name string, names []string) []string {
	limit := max(2, len(name)/3)
	var near []string
	dist := map[string]int{}
	for _, n := range names {
		if d := editDistance(strings.ToLower(name), strings.ToLower(n)); d <= limit {
			near, dist[n] = append(near, n), d
		}
	}
	slices.SortStableFunc(near, func(a, b string) int { return dist[a] - dist[b] })
	return near[:min(3, len(near))]
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("cancel", stderr)
	wait := fs.Duration("wait", 3*time.Second, "how long to wait for the cancelled calls to report before saying nothing was cancelled")
	pos, err := parseList(fs, args, "cancel needs a reply id", bus.ValidID, "id %q must match ^[A-Za-z0-9_-]{1,128}$")
	if err != nil {
		return err
	}
	cl, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	replyID, calls := pos[0], pos[1:]
	session, err := cancelSession(ctx, cl, fs, cn, replyID)
	if err != nil {
		return err
	}
	// The cancel is fire-and-forget (docs/protocol.md 3.5), so watch for
	// the interrupted results to tell whether anything was cancelled.
	events, err := cl.Watch(ctx, session)
	if err != nil {
		return err
	}
	defer func() { _ = events.Stop(context.WithoutCancel(ctx)) }()
	if err := cl.Cancel(ctx, session, replyID, calls...); err != nil {
		return err
	}
	ended, err := awaitInterrupted(ctx, events, replyID, calls, *wait)
	if err != nil {
		return err
	}
	if len(ended) == 0 {
		return fmt.Errorf("nothing was cancelled: no call of reply %s in session %s was running or parked (within %v); check the reply id and --session", replyID, session, *wait)
	}
	fmt.Fprintf(stdout, "cancelled: %s of reply %s in session %s\n", strings.Join(ended, ", "), replyID, session)
	return nil
}

// cancelSession is the session of reply replyID: --session when given,
// else the one session where a call of the reply is parked, else (a
// running call, which no list shows) the default session.
func cancelSession(ctx context.Context, cl *client.Client, fs *flag.FlagSet, cn *conn, replyID string) (string, error) {
	if cli.Given(fs, "session") {
		return cn.session, nil
	}
	parked, err := listParked(ctx, cl, "")
	if err != nil {
		return cn.session, nil // a role that may not list: cancel as before
	}
	var sessions []string
	for _, p := range parked {
		if p.ReplyID == replyID && !slices.Contains(sessions, p.Session) {
			sessions = append(sessions, p.Session)
		}
	}
	switch len(sessions) {
	case 0:
		return cn.session, nil
	case 1:
		return sessions[0], nil
	}
	return "", fmt.Errorf("reply id %s is ambiguous: calls of it are parked in sessions %s; pick one with --session", replyID, strings.Join(sessions, ", "))
}

// awaitInterrupted collects the calls of replyID (of calls, or any) that
// end interrupted, until all of calls have or wait passes with none new.
func awaitInterrupted(ctx context.Context, events *client.Events, replyID string, calls []string, wait time.Duration) ([]string, error) {
	calls = slices.Compact(slices.Sorted(slices.Values(calls)))
	var ended []string
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ended, ctx.Err()
		case <-timer.C:
			return ended, nil
		case e, ok := <-events.C:
			if !ok {
				return ended, nil
			}
			var results []bus.Result
			var r bus.Result
			var done bus.BatchDone
			switch {
			case e.ReplyID != replyID:
			case e.Type == bus.TypeBatchDone && e.DataAs(&done) == nil: // it carries every result of the batch
				results = done.Results
			case e.Type == bus.TypeCallResult && e.DataAs(&r) == nil:
				results = []bus.Result{r}
			}
			n := len(ended)
			for _, r := range results {
				if r.State == bus.StateInterrupted && (len(calls) == 0 || slices.Contains(calls, r.ID)) && !slices.Contains(ended, r.ID) {
					ended = append(ended, r.ID)
				}
			}
			switch {
			case e.ReplyID == replyID && e.Type == bus.TypeBatchDone, len(calls) > 0 && len(ended) == len(calls):
				return ended, nil
			case len(ended) > n:
				timer.Reset(wait) // more may follow
			}
		}
	}
}

// runFetch prints (or with -o saves) the stored output a nats-object:// url
// refers to (protocol 5.9), read through the routers, or with --direct from
// the object store (operators).
func runFetch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("fetch", stderr)
	outPath := fs.String("o", "", "write the output to this file instead of stdout")
	direct := fs.Bool("direct", false, "read the outputs object store itself, not through the routers (operators only)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError(fs, "fetch takes one reference (nats-object://<bucket>/<name>#sha256=<digest>), got %d arguments", len(pos))
	}
	cl, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	var obj *client.Output
	switch {
	case *direct:
		obj, err = cl.Outputs().FetchDirect(ctx, pos[0])
	case cli.Given(fs, "session"): // else the name's first token is the session
		obj, err = cl.Outputs().FetchSession(ctx, cn.session, pos[0])
	default:
		obj, err = cl.Outputs().Fetch(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	defer obj.Close()
	if *outPath == "" {
		_, err = io.Copy(stdout, obj)
		return err
	}
	// Written next to the target and renamed, so a failed fetch (a digest
	// mismatch, a lost connection) leaves no partial file behind.
	n, err := private.WriteFile(*outPath, obj)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", pos[0], err)
	}
	fmt.Fprintf(stderr, "%d bytes (%s) written to %s\n", n, obj.MediaType, *outPath)
	return nil
}

// maxTurnInput bounds the assistant message read from stdin or a file.
const maxTurnInput = 64 << 20

// runTurn reads one assistant message of a model API, runs its tool calls as
// one batch and prints the tool-result messages that API expects next.
func runTurn(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("turn", stderr)
	format := fs.String("format", bus.FormatOpenAI, "the API of the message: openai, openai-responses, anthropic or gemini")
	in := fs.String("in", "-", "file holding the assistant message (or the API's whole response); - is standard input")
	replyID := fs.String("reply-id", "", "reply id of the batch; re-sending one is deduplicated (default: a fresh id)")
	wait := fs.Bool("wait", false, "when calls park, print progress and wait for their answers, then print the whole turn's messages (without it: the messages of the calls done, the parked calls, exit status 3)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError(fs, "turn takes no arguments (the message comes from --in or standard input)")
	}
	if *replyID, err = cn.replyID(fs, *replyID); err != nil {
		return err
	}
	msg, err := readInput(*in, os.Stdin)
	if err != nil {
		return err
	}
	turn, err := client.ParseModelTurn(*format, msg)
	if err != nil {
		return err
	}
	cl, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	batch := turn.Batch()
	fol, stop, err := follow(ctx, cl, cn.session, *replyID, len(batch.Calls), stderr, *wait)
	if err != nil {
		return err
	}
	defer stop()
	reply, err := cl.Call(ctx, cn.session, batch, client.WithReplyID(*replyID))
	if err != nil {
		return err
	}
	results, parked := reply.Results, reply.Parked
	for _, p := range parked {
		fmt.Fprintf(stderr, "call %s of %s parked, waiting for %s: %s\n", p.ID, p.Name, kindText(p.Kind), nextCommand(bus.ParkedCall{ID: p.ID, Name: p.Name, Kind: p.Kind}, false))
	}
	if *wait && len(parked) > 0 {
		fmt.Fprintf(stderr, "waiting for %d parked call(s)...\n", len(parked))
		late, err := fol.await(ctx, parked)
		if err != nil {
			return err
		}
		results, parked = append(results, late...), nil
	}
	out, err := turn.Reply(results, parked)
	if err != nil {
		return err
	}
	if err := cli.WriteJSON(stdout, struct {
		Messages []json.RawMessage `json:"messages"`
		Parked   []bus.Parked      `json:"parked"`
		ReplyID  string            `json:"reply_id"`
	}{Messages: append([]json.RawMessage{}, out.Messages...), Parked: out.Parked, ReplyID: *replyID}); err != nil {
		return err
	}
	if len(out.Parked) > 0 {
		return &parkedError{n: len(out.Parked)}
	}
	return nil
}

// readInput reads name ("-" for stdin), at most maxTurnInput bytes.
func readInput(name string, stdin io.Reader) ([]byte, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxTurnInput+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTurnInput {
		return nil, fmt.Errorf("the message is larger than %d bytes", maxTurnInput)
	}
	return b, nil
}

// Exit statuses of toolbus (toolbus help): 0 done, every call succeeded;
// 1 an error, a usage error or a call that did not succeed; 3 nothing
// failed but calls are still parked; 130 a second interrupt.
const exitParked = 3

// parkedError ends call and turn when calls are still parked, waiting for
// an answer or a confirmation: not a failure, but not done either.
type parkedError struct{ n int }

func (e *parkedError) Error() string {
	return fmt.Sprintf("%d call(s) parked, waiting for an answer or a confirmation (the commands above give it; --wait waits for it); exit status %d", e.n, exitParked)
}

// ExitCode is the exit status cli.Main uses.
func (e *parkedError) ExitCode() int { return exitParked }

// follower follows one reply's events while a command waits: it prints
// each call's progress and, for each call that parks (again), the command
// that answers it, to w; it hands the call.result events to await.
type follower struct {
	results chan bus.Result
	// parked hands the calls of call.parked events to await, which prints
	// only those whose kind differs from what the reply already said, so
	// a call's parking is told once (the reply and the event both carry it).
	parked chan bus.Parked
	w      io.Writer
	// A confirmed call of an external tool parks again for its answer with
	// no event of its own (docs/protocol.md 3.4: call.parked once per
	// batch), so await lists the reply's parked calls every pollEvery
	// (poll) and says when a call's kind changed.
	cl               *client.Client
	session, replyID string
}

// pollEvery is how often a wait looks at the parked calls.
const pollEvery = 2 * time.Second

// follow watches session's events and follows batch replyID in them,
// before the batch is sent, so that no result is missed; calls is the
// batch's size (at most one result each, so the hand-over never blocks).
// stop ends the watch. Without wait (no --wait) it follows nothing.
func follow(ctx context.Context, cl *client.Client, session, replyID string, calls int, w io.Writer, wait bool) (f *follower, stop func(), err error) {
	if !wait {
		return nil, func() {}, nil
	}
	events, err := cl.Watch(ctx, session)
	if err != nil {
		return nil, nil, err
	}
	f = &follower{results: make(chan bus.Result, calls+16), parked: make(chan bus.Parked, calls+16), w: w,
		cl: cl, session: session, replyID: replyID}
	go func() {
		defer close(f.results)
		for e := range events.C {
			if e.ReplyID != replyID {
				continue
			}
			switch e.Type {
			case bus.TypeCallProgress:
				if p, ok := dataOf[bus.Progress](e); ok {
					fmt.Fprintf(w, "progress %s #%d: %s\n", e.ToolCallID, p.Seq, blocksText(p.Output))
				}
			case bus.TypeCallParked:
				if p, ok := dataOf[bus.ParkedEvent](e); ok {
					for _, c := range p.Calls {
						select {
						case f.parked <- c:
						default: // only the news is lost; await also polls
						}
					}
				}
			case bus.TypeCallResult:
				if r, ok := dataOf[bus.Result](e); ok {
					select {
					case f.results <- r:
					default: // more results than calls: not ours to wait for
					}
				}
			}
		}
	}()
	return f, func() { _ = events.Stop(context.WithoutCancel(ctx)) }, nil
}

// await returns the results of the parked calls, in the order they come.
func (f *follower) await(ctx context.Context, parked []bus.Parked) ([]bus.Result, error) {
	waiting := make(map[string]string, len(parked)) // call id → the kind it was last seen parked for
	for _, p := range parked {
		waiting[p.ID] = p.Kind
	}
	// moved prints a waiting call whose parked kind changed since it was
	// last seen (a confirmation given, the call now waits for its answer).
	moved := func(p bus.ParkedCall) {
		if kind, ok := waiting[p.ID]; ok && kind != p.Kind {
			waiting[p.ID] = p.Kind
			fmt.Fprintf(f.w, "call %s of %s now waits for %s: %s\n", p.ID, p.Name, kindText(p.Kind), nextCommand(p, false))
		}
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var out []bus.Result
	for len(waiting) > 0 {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-tick.C: // a listing that fails only loses the news: the result still comes as an event
			lctx, cancel := context.WithTimeout(ctx, pollEvery)
			calls, _ := listParked(lctx, f.cl, f.session)
			cancel()
			for _, p := range calls {
				if p.ReplyID == f.replyID {
					moved(p)
				}
			}
		case p := <-f.parked:
			moved(bus.ParkedCall{ID: p.ID, Name: p.Name, Kind: p.Kind})
		case r, ok := <-f.results:
			if !ok {
				return out, errors.New("the event subscription ended")
			}
			if _, ok := waiting[r.ID]; ok {
				delete(waiting, r.ID)
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// blocksText is the text of blocks on one line ([kind] for others).
func blocksText(blocks []bus.Block) string {
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, strings.Join(strings.Fields(b.Text), " "))
		} else {
			parts = append(parts, "["+b.Type+"]")
		}
	}
	return strings.Join(parts, " ")
}
