package embedded

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// bigText is n bytes of numbered lines: printable, so the JSON encoding
// is n bytes plus the quotes, and every byte is checked on the way back.
func bigText(n int) string {
	var b strings.Builder
	b.Grow(n + 64)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %08d: the quick brown fox jumps over the lazy dog\n", i)
	}
	return b.String()[:n]
}

// textOfSize is a text whose one-block output encodes to exactly size
// bytes (no character in it needs escaping).
func textOfSize(t *testing.T, size int) string {
	s := strings.Repeat("abcdefghij", size/10+1)
	s = s[:len(s)-int(offload.Size(bus.Text(s), false)-int64(size))]
	if n := offload.Size(bus.Text(s), false); n != int64(size) {
		t.Fatalf("text of %d bytes encodes to %d", size, n)
	}
	return s
}

// startWorker starts a worker with cfg (addWorker's has the defaults)
// and waits until the routers see tools live.
func (e *env) startWorker(cfg worker.Config, setup func(w *worker.Worker), tools ...string) {
	e.t.Helper()
	_, err := e.d.AddWorker(e.t.Context(), xtest.WorkerSpec{Config: cfg, Setup: func(w *worker.Worker) error {
		setup(w)
		return nil
	}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.waitLive(tools...)
}

// fetched reads back every stored block of out, in order, and returns
// the stored blocks.
func fetched(t *testing.T, cl *client.Client, out []bus.Block) (stored []bus.Block, data [][]byte) {
	t.Helper()
	for _, b := range out {
		if !client.IsStored(b) {
			continue
		}
		got, err := fetchAll(t, cl, b.URL)
		if err != nil {
			t.Fatalf("fetch %s: %v", b.URL, err)
		}
		if int64(len(got)) != b.Size {
			t.Errorf("%s: %d bytes fetched, the block says %d", b.URL, len(got), b.Size)
		}
		stored, data = append(stored, b), append(data, got)
	}
	return stored, data
}

// stallBound is how long a fetch may go without a byte before it fails:
// a slow transfer on a loaded machine goes on, a stalled one does not.
const stallBound = time.Minute

// fetchAll reads the stored output at url whole, for as long as its windows
// keep coming (a new one within stallBound) until the test ends. A fixed
// deadline on the whole read (a minute, as testCtx) failed a 20 MiB fetch
// from a 3-node cluster at load 20 that was progressing. The read has a
// deadline of its own, so that each window's request waits up to the stall
// bound rather than the client's 30 s for a request without one (a window
// of 2 MiB read from the cluster outlasted that under -race at load 22).
func fetchAll(t *testing.T, cl *client.Client, url string) ([]byte, error) {
	t.Helper()
	whole, stop := context.WithTimeout(t.Context(), 30*time.Minute)
	defer stop()
	ctx, cancel := context.WithCancelCause(whole)
	defer cancel(nil)
	stall := time.AfterFunc(stallBound, func() { cancel(fmt.Errorf("no byte of %s for %v", url, stallBound)) })
	defer stall.Stop()
	obj, err := cl.Outputs().Fetch(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", err, context.Cause(ctx))
	}
	defer obj.Close()
	var got bytes.Buffer
	buf := make([]byte, 64<<10)
	for {
		n, err := obj.Read(buf)
		if n > 0 {
			stall.Reset(stallBound)
			got.Write(buf[:n])
		}
		if err == io.EOF {
			return got.Bytes(), nil
		}
		if err != nil {
			return nil, fmt.Errorf("after %d bytes: %w (%v)", got.Len(), err, context.Cause(ctx))
		}
	}
}

// callStoring is e.call for a call whose worker stores a large output:
// it waits for the router's answer, which comes by the tool's timeout
// (bus.DefaultTimeoutMS, 5 min) at the latest, and a minute more. The
// call's time is CPU at the machine's share (hashing, encoding, and a
// replicated store of 160 chunks two at a time, docs/offload.md), so no
// fixed bound under that fits: testCtx's minute failed the 20 MiB call on a
// 3-node cluster under -race at load 24, and a minute without the outputs
// stream growing failed it too (its time before and after the chunks).
func (e *env) callStoring(t *testing.T, session string, calls []bus.Call, opts ...client.CallOption) *bus.Reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bus.DefaultTimeoutMS*time.Millisecond+time.Minute)
	defer cancel()
	reply, err := e.client.Call(ctx, session, bus.Batch{Calls: calls}, opts...)
	if err != nil {
		t.Fatalf("call on session %s: %v", session, err)
	}
	checkCallOrder(t, calls, reply.Results)
	return reply
}

// TestLargeOutputs: a 20 MiB output (above the 8 MiB payload limit)
// reaches the agent through the outputs object store, in the reply, the
// call.result event, batch.done and a re-sent batch's ledgered result, and
// is fetched back byte for byte; an output of exactly the inline limit stays
// inline and one byte more is stored; a worker's small inline limit stores
// small outputs; a data block is stored as its decoded bytes.
func TestLargeOutputs(t *testing.T) {
	// A worker storing 20 MiB on a replicated cluster under -race on a busy
	// machine can miss the test heartbeat's three beats (1.5 s) and be
	// judged vanished (unknown_outcome): these calls get 2 s beats.
	e := startEnvBeat(t, 2, onCluster(t), router.Config{}, 2*time.Second)
	huge := bigText(20 << 20)
	atLimit := textOfSize(t, offload.DefaultInlineLimit)
	overLimit := atLimit + "x"
	image := bytes.Repeat([]byte{0x89, 'P', 'N', 'G', 0, 1, 2, 0xff}, 1<<20) // 8 MiB decoded, ~11 MiB base64
	tools := map[string]*bus.ExecResult{
		"huge":       {Output: bus.Text(huge)},
		"at_limit":   {Output: bus.Text(atLimit)},
		"over_limit": {Output: bus.Text(overLimit)},
		"image": {Output: []bus.Block{{Type: bus.BlockText, Text: "a chart"},
			{Type: bus.BlockData, MediaType: "image/png", Data: base64.StdEncoding.EncodeToString(image)}}},
	}
	names := []string{"huge", "at_limit", "over_limit", "image"}
	e.startWorker(worker.Config{}, func(w *worker.Worker) {
		for _, name := range names {
			out := tools[name]
			handle(t, w, bus.ToolDef{Name: name, ConcurrencySafe: true, Permission: bus.PermissionAllow},
				func(context.Context, *worker.Call) (*bus.ExecResult, error) { return out, nil })
		}
	}, names...)

	t.Run("huge", func(t *testing.T) {
		ev := e.watch(t, "big")
		reply := e.callStoring(t, "big", []bus.Call{{ID: "c1", Name: "huge"}}, client.WithReplyID("turn-1"))
		r := reply.Results[0]
		if r.State != bus.StateSuccess || len(r.Output) != 2 || r.Output[0].Type != bus.BlockText {
			t.Fatalf("result %.500s", jsonOf(r))
		}
		if !strings.HasPrefix(r.Output[0].Text, huge[:1000]) || !strings.Contains(r.Output[0].Text, r.Output[1].URL) {
			t.Errorf("preview %q", r.Output[0].Text)
		}
		stored, data := fetched(t, e.client, r.Output)
		if len(stored) != 1 || stored[0].MediaType != "text/plain; charset=utf-8" || string(data[0]) != huge {
			t.Fatalf("stored %s, %d bytes fetched, equal %v", jsonOf(stored), len(data[0]), string(data[0]) == huge)
		}
		if !strings.HasPrefix(stored[0].URL, "nats-object://toolbus_outputs/big.turn-1.c1.") {
			t.Errorf("url %s", stored[0].URL)
		}
		for _, x := range collect(t, ev, batchDone("turn-1")) {
			switch x.Type {
			case bus.TypeCallResult:
				var res bus.Result
				if err := json.Unmarshal(x.Data, &res); err != nil || jsonOf(res) != jsonOf(r) {
					t.Errorf("call.result %s, err %v", x.Data, err)
				}
			case bus.TypeBatchDone:
				var done bus.BatchDone
				if err := json.Unmarshal(x.Data, &done); err != nil || jsonOf(done.Results) != jsonOf(reply.Results) {
					t.Errorf("batch.done %s, err %v", x.Data, err)
				}
			}
		}
		// The ledger kept the reference: a re-sent batch gets the same result.
		again := e.call(t, "big", []bus.Call{{ID: "c1", Name: "huge"}}, client.WithReplyID("turn-1"))
		if jsonOf(again.Results) != jsonOf(reply.Results) {
			t.Errorf("re-sent batch got %.500s", jsonOf(again.Results))
		}
		// The object is there for any client: plain object-store calls.
		obj, err := e.client.Outputs().Fetch(testCtx(t), stored[0].URL)
		if err != nil {
			t.Fatal(err)
		}
		defer obj.Close()
		if obj.Size != int64(len(huge)) || obj.MediaType != "text/plain; charset=utf-8" {
			t.Errorf("object size %d media %q", obj.Size, obj.MediaType)
		}
	})
	t.Run("inline_limit", func(t *testing.T) {
		reply := e.call(t, "lim", []bus.Call{{ID: "at", Name: "at_limit"}, {ID: "over", Name: "over_limit"}})
		at, over := resultOf(t, reply.Results, "at"), resultOf(t, reply.Results, "over")
		if len(at.Output) != 1 || at.Output[0].Text != atLimit {
			t.Errorf("an output of exactly the inline limit was not kept inline: %d blocks", len(at.Output))
		}
		stored, data := fetched(t, e.client, over.Output)
		if len(stored) != 1 || string(data[0]) != overLimit {
			t.Errorf("an output one byte over the inline limit: %d stored: %.300s", len(stored), jsonOf(over))
		}
	})
	t.Run("data_block", func(t *testing.T) {
		reply := e.callStoring(t, "img", []bus.Call{{ID: "c1", Name: "image"}})
		r := reply.Results[0]
		if len(r.Output) != 2 || r.Output[0].Text != "a chart" {
			t.Fatalf("result %.500s", jsonOf(r))
		}
		stored, data := fetched(t, e.client, r.Output)
		if len(stored) != 1 || stored[0].MediaType != "image/png" || !bytes.Equal(data[0], image) {
			t.Errorf("stored %s", jsonOf(stored))
		}
	})
}

// TestOutputLimitsConfigured: a worker's small inline limit stores a
// small output (and its progress); an output above its MaxOutput is a
// tool_error that says so, and its state patch is not applied.
func TestOutputLimitsConfigured(t *testing.T) {
	e := newEnv(t, 1)
	small := bigText(4096)
	e.startWorker(worker.Config{InlineLimit: 1024, MaxOutput: 1 << 20}, func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "small", ConcurrencySafe: true, Permission: bus.PermissionAllow},
			func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
				if err := c.Progress(bus.Block{Type: bus.BlockText, Text: small}); err != nil {
					return nil, err
				}
				return textResult(small), nil
			})
		handle(t, w, bus.ToolDef{Name: "too_big", ConcurrencySafe: true, Permission: bus.PermissionAllow, StateInjected: true},
			func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
				_ = c.PatchState(map[string]any{"touched": true})
				return textResult(bigText(2 << 20)), nil
			})
	}, "small", "too_big")
	ev := e.watch(t, "cfg")
	reply := e.call(t, "cfg", []bus.Call{{ID: "s", Name: "small"}}, client.WithReplyID("r1"))
	stored, data := fetched(t, e.client, reply.Results[0].Output)
	if len(stored) != 1 || string(data[0]) != small {
		t.Errorf("a 4 KiB output with a 1 KiB inline limit: %s", jsonOf(reply.Results[0]))
	}
	for _, x := range collect(t, ev, batchDone("r1")) {
		if x.Type == bus.TypeCallProgress {
			var p bus.Progress
			if err := json.Unmarshal(x.Data, &p); err != nil {
				t.Fatal(err)
			}
			if _, data := fetched(t, e.client, p.Output); len(data) != 1 || string(data[0]) != small {
				t.Errorf("progress %s", x.Data)
			}
		}
	}

	reply = e.call(t, "cfg", []bus.Call{{ID: "b", Name: "too_big"}})
	wantFailure(t, reply.Results[0], bus.StateError, bus.CodeToolError,
		fmt.Sprintf("Error: the output of tool 'too_big' is %d bytes, more than this worker's limit of %d bytes; it was neither sent nor stored.",
			offload.Size(bus.Text(bigText(2<<20)), false), 1<<20))
	var sess struct {
		State struct {
			State json.RawMessage `json:"state"`
		} `json:"state"`
	}
	if err := e.client.Admin(testCtx(t), "session.get", "cfg", nil, &sess); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sess.State.State), "touched") {
		t.Errorf("the refused result's state patch was applied: %s", sess.State.State)
	}
}

// TestLargeAnswer: an external handler's answer above the payload limit
// goes through client.Parked().Answer's offload and reaches the agent as a
// reference; one above the client's MaxOutput is refused before anything
// is sent, and the call stays parked.
func TestLargeAnswer(t *testing.T) {
	e := newEnv(t, 1)
	e.registerDefs(t, bus.ToolDef{Name: "pick", External: true, Permission: bus.PermissionAllow})
	ev := e.watch(t, "ans")
	reply, err := e.client.Call(testCtx(t), "ans", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "pick"}}}, client.WithReplyID("r1"))
	if err != nil || len(reply.Parked) != 1 {
		t.Fatalf("reply %s", jsonOf(reply))
	}
	strict := client.New(e.connect(t), client.Config{MaxOutput: 1 << 20})
	answer := bigText(9 << 20)
	err = strict.Parked().Answer(testCtx(t), "pick", "ans", "r1", "c1", bus.Answer{State: bus.StateSuccess, Output: bus.Text(answer)})
	if err == nil || !strings.Contains(err.Error(), "more than the limit of 1048576 bytes") {
		t.Fatalf("an answer above MaxOutput: %v", err)
	}
	if err := e.client.Parked().Answer(testCtx(t), "pick", "ans", "r1", "c1", bus.Answer{State: bus.StateSuccess, Output: bus.Text(answer)}); err != nil {
		t.Fatal(err)
	}
	var done bus.BatchDone
	for _, x := range collect(t, ev, batchDone("r1")) {
		if x.Type == bus.TypeBatchDone {
			if err := json.Unmarshal(x.Data, &done); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(done.Results) != 1 {
		t.Fatalf("batch.done %s", jsonOf(done))
	}
	if _, data := fetched(t, e.client, done.Results[0].Output); len(data) != 1 || string(data[0]) != answer {
		t.Errorf("answer not fetched back: %.300s", jsonOf(done.Results[0]))
	}
}

// TestBatchOfLargeOutputs: nine calls of one batch each return an output
// just under the 1 MiB inline limit, so each result travels inline, but
// together they are above the 8 MiB payload limit: the reply and
// batch.done must still reach the agent (protocol 5.9: "nothing is
// dropped"). This needs the router to bound the aggregate messages it
// sends (reply, batch.done, the continuation record); see the report of
// branch limits.
func TestBatchOfLargeOutputs(t *testing.T) {
	// The worker's beats travel on its connection behind the nine 1 MiB
	// replies: under -race on a busy machine a beat arrived 2 s late, past
	// the test heartbeat's three beats (1.5 s), and the router ended the
	// calls still on their way as vanished (unknown_outcome). 2 s beats.
	e := startEnvBeat(t, 1, onCluster(t), router.Config{}, 2*time.Second)
	text := textOfSize(t, offload.DefaultInlineLimit-100)
	e.startWorker(worker.Config{}, func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "mib", ConcurrencySafe: true, ReadOnly: true},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult(text), nil })
	}, "mib")
	var calls []bus.Call
	for i := range 9 {
		calls = append(calls, bus.Call{ID: fmt.Sprintf("c%d", i), Name: "mib"})
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Second)
	defer cancel()
	reply, err := e.client.Call(ctx, "agg", bus.Batch{Calls: calls})
	if err != nil {
		t.Fatalf("no reply for nine 1 MiB results: %v", err)
	}
	for _, r := range reply.Results {
		_, data := fetched(t, e.client, r.Output)
		if r.State != bus.StateSuccess || (len(data) == 0 && (len(r.Output) != 1 || r.Output[0].Text != text)) {
			t.Errorf("result %s: %.200s", r.ID, jsonOf(r))
		}
	}
}

// TestOutputReadRightAfterResult: on the 3-node cluster with replicas 3,
// a stored output is readable the moment its result is, 1,000 times:
// each result is fetched at once through the routers (from a connection on
// another node than the worker's) and read directly from the store as an
// operator would; never "not found" (protocol 5.9: reads from the stream
// leader, a bounded retry). The outputs are small, just above the
// worker's low inline limit (1 KiB), to keep it fast.
func TestOutputReadRightAfterResult(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 calls on a cluster")
	}
	e := startEnv(t, 2, true, router.Config{})
	e.startWorker(worker.Config{InlineLimit: 1024}, func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "small_stored", ConcurrencySafe: true, ReadOnly: true},
			func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
				return textResult(strings.Repeat(c.ID+" ", 400)), nil // > 1 KiB: stored
			})
	}, "small_stored")
	const total, parallel = 1000, 8
	agents := make([]*client.Client, parallel)
	for i := range agents {
		agents[i] = client.New(e.connect(t), client.Config{Source: "test/agent"}) // round-robin over the nodes
	}
	errs := make(chan error, parallel)
	for g := range parallel {
		go func() {
			errs <- func() error {
				cl := agents[g]
				for i := g; i < total; i += parallel {
					id := fmt.Sprintf("c%d", i)
					r, err := callUntilResult(cl, id)
					if err != nil {
						return err
					}
					if r.State != bus.StateSuccess || len(r.Output) != 2 || !client.IsStored(r.Output[1]) {
						return fmt.Errorf("call %d: %.300s", i, jsonOf(r))
					}
					want := strings.Repeat(id+" ", 400)
					got, err := cl.Outputs().FetchBytes(testCtx(t), r.Output[1].URL)
					if err != nil || string(got) != want {
						return fmt.Errorf("call %d: fetched right after the result: %q, %v", i, got, err)
					}
					obj, err := cl.Outputs().FetchDirect(testCtx(t), r.Output[1].URL)
					if err != nil {
						return fmt.Errorf("call %d: read directly right after the result: %v", i, err)
					}
					got, err = io.ReadAll(obj)
					if err != nil || string(got) != want {
						return fmt.Errorf("call %d: read directly: %q, %v", i, got, err)
					}
				}
				return nil
			}()
		}()
	}
	for range parallel {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// callUntilResult calls small_stored until it gets the tool's own result:
// on a loaded machine a call may end unknown_outcome (its worker's beats
// came late) or time out, which says nothing about reading outputs.
func callUntilResult(cl *client.Client, id string) (bus.Result, error) {
	var r bus.Result
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		reply, err := cl.Call(ctx, "fast", bus.Batch{Calls: []bus.Call{{ID: id, Name: "small_stored"}}})
		cancel()
		if err != nil {
			return r, err
		}
		if r = reply.Results[0]; r.Error == nil || (r.Error.Code != bus.CodeUnknownOutcome && r.Error.Code != bus.CodeTimeout && r.Error.Code != bus.CodeUnavailable) {
			return r, nil
		}
	}
	return r, fmt.Errorf("call %s: no result in 10 tries: %.300s", id, jsonOf(r))
}

// TestStoredOutputSealed: the router records each stored output's digest
// in the url it passes on, for a core tool, a durable tool (its result
// comes on P.result.<tool>) and progress alike, and the agent reads each
// back through P.outputs.<session>; a url without its digest, or read on
// another session's subject, is refused.
func TestStoredOutputSealed(t *testing.T) {
	e := newEnv(t, 1)
	text := bigText(3000)
	e.startWorker(worker.Config{InlineLimit: 1024}, func(w *worker.Worker) {
		for _, def := range []bus.ToolDef{{Name: "core_big", ReadOnly: true}, {Name: "durable_big", Durable: true, Permission: bus.PermissionAllow}} {
			handle(t, w, def, func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult(text), nil })
		}
	}, "core_big", "durable_big")
	for _, tool := range []string{"core_big", "durable_big"} {
		reply := e.call(t, "sealed", []bus.Call{{ID: "c1", Name: tool}})
		r := reply.Results[0]
		stored, data := fetched(t, e.client, r.Output)
		if r.State != bus.StateSuccess || len(stored) != 1 || string(data[0]) != text {
			t.Fatalf("%s: %.500s", tool, jsonOf(r))
		}
		ref, err := offload.ParseRef(stored[0].URL)
		if err != nil || len(ref.Digest) != 64 || !strings.HasPrefix(ref.Name, "sealed.") {
			t.Fatalf("%s: url %s: %v", tool, stored[0].URL, err)
		}
		bare := offload.Ref{Bucket: ref.Bucket, Name: ref.Name}.String()
		if _, err := e.client.Outputs().FetchBytes(testCtx(t), bare); err == nil || !strings.Contains(err.Error(), "#sha256=") {
			t.Errorf("%s: a url without digest: %v", tool, err)
		}
		if _, err := e.client.Outputs().FetchSession(testCtx(t), "other", stored[0].URL); err == nil || !strings.Contains(err.Error(), "no output") {
			t.Errorf("%s: read on another session's subject: %v", tool, err)
		}
	}
}
