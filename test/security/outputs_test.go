package security

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

const outputsStream = "OBJ_toolbus_outputs"

// bigRef calls bigread in session s1 as session-s1 and returns the stored
// output's reference.
func bigRef(t *testing.T, ac *client.Client, replyID string) string {
	t.Helper()
	return bigRefIn(t, ac, "s1", replyID)
}

// TestOutputsPerSession: a stored output of session s1 is read by s1's
// agent and the operator, never by s2's nor the shared agent (s1 has its own user): NATS
// refuses s2 every direct read of the outputs object store (message get
// by sequence, direct get, stream info, a consumer on the chunks) and its
// request on P.outputs.s1; the router refuses s1's object on s2's own
// subject exactly as a missing one. Workers and handlers cannot read the
// store either.
func TestOutputsPerSession(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	s1 := d.conn("session-s1")
	ref := bigRef(t, s1.client(), "r1")
	if b, err := s1.client().Outputs().FetchBytes(testCtx(t), ref); err != nil || len(b) != 2<<20 {
		t.Fatalf("s1 reads its own output: %d bytes, %v", len(b), err)
	}
	// s1 has its own agent user, so the shared agent is denied P.outputs.s1
	// like everything else of s1 (TestSharedAgentLockedOut).
	shared := d.conn("agent")
	shared.denyPublish("toolbus.outputs.s1")
	ctx, cancel := context.WithTimeout(testCtx(t), 2*time.Second)
	defer cancel()
	if b, err := shared.client().Outputs().FetchBytes(ctx, ref); err == nil {
		t.Fatalf("the shared agent read s1's output: %d bytes", len(b))
	}
	op := d.conn("operator")
	obj, err := op.client().Outputs().FetchDirect(testCtx(t), ref)
	must(t, err)
	if b, err := io.ReadAll(obj); err != nil || len(b) != 2<<20 {
		t.Fatalf("the operator reads the store directly: %d bytes, %v", len(b), err)
	}
	r, err := offload.ParseRef(ref)
	must(t, err)
	js := testkit.JetStream(t, op.nc)
	obs, err := js.ObjectStore(testCtx(t), "toolbus_outputs")
	must(t, err)
	if s, err := obs.GetString(testCtx(t), r.Name); err != nil || len(s) != 2<<20 {
		t.Fatalf("the operator reads with the plain object-store API (nats object get): %d bytes, %v", len(s), err)
	}
	op.noViolations()

	s2 := d.conn("session-s2")
	// Through the router, on s2's own subject: no such output.
	_, err = s2.client().Outputs().FetchSession(shortCtx(t), "s2", ref)
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, "no output") {
		t.Fatalf("s2 fetching s1's output on its own subject: %v", err)
	}
	// On s1's subject: NATS refuses.
	if _, err := s2.client().Outputs().Fetch(shortCtx(t), ref); err == nil {
		t.Fatal("s2 fetched s1's output on toolbus.outputs.s1")
	}
	s2.waitViolation("Publish", "toolbus.outputs.s1")
	if _, err := s2.client().Outputs().FetchDirect(shortCtx(t), ref); err == nil {
		t.Fatal("s2 read the outputs store directly")
	}
	meta := "$O.toolbus_outputs.M." + base64.URLEncoding.EncodeToString([]byte(r.Name))
	for _, l := range []*login{s2, d.conn("agent"), d.conn("worker"), d.conn("handler-picker")} {
		for _, req := range []struct{ subject, body string }{
			{"$JS.API.STREAM.MSG.GET." + outputsStream, `{"seq":1}`},
			{"$JS.API.DIRECT.GET." + outputsStream, `{"seq":1}`},
			{"$JS.API.DIRECT.GET." + outputsStream + "." + meta, ``},
			{"$JS.API.STREAM.INFO." + outputsStream, `{"subjects_filter":">"}`},
			{"$JS.API.CONSUMER.CREATE." + outputsStream + ".x.$O.toolbus_outputs.C.>", `{}`},
			{"$JS.API.CONSUMER.CREATE." + outputsStream, `{}`},
		} {
			must(t, l.nc.PublishRequest(req.subject, "_INBOX."+l.name+".x", []byte(req.body)))
			l.waitViolation("Publish", req.subject)
		}
		ljs, err := jetstream.New(l.nc)
		must(t, err)
		if _, err := ljs.ObjectStore(shortCtx(t), "toolbus_outputs"); err == nil {
			t.Errorf("%s opened the outputs object store", l.name)
		}
	}
}

// TestForgedOutputNeverServed: a worker (any worker may publish to the
// outputs store) that learnt a stored output's name tries to replace it:
// JetStream refuses a rollup (of the object's subject, or Nats-Rollup: all
// of the whole bucket), since the outputs stream allows none; metadata
// published without one, forged chunks and all, openly or repeating the
// recorded digest, changes nothing: the victim still reads the original,
// byte for byte. (Where a store allowed rollups, the router would refuse
// the forgery instead: bus/offload TestServe.)
func TestForgedOutputNeverServed(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	s1 := d.conn("session-s1")
	wl := d.conn("worker")
	original := strings.Repeat("0123456789abcdef", 128<<10)
	for i, keepDigest := range []bool{false, true} {
		ref := bigRef(t, s1.client(), "forge"+string(rune('a'+i)))
		r, err := offload.ParseRef(ref)
		must(t, err)
		for _, rollup := range []string{jetstream.MsgRollupSubject, jetstream.MsgRollupAll} {
			if err := forge(t, wl.nc, r, keepDigest, rollup); err == nil || !strings.Contains(err.Error(), "rollup not permitted") {
				t.Fatalf("a forged rollup %s: %v", rollup, err)
			}
		}
		must(t, forge(t, wl.nc, r, keepDigest, ""))
		wl.noViolations() // NATS lets a worker write
		got, err := s1.client().Outputs().FetchBytes(testCtx(t), ref)
		if err != nil || string(got) != original {
			t.Fatalf("fetch after a forged overwrite (digest kept %v): %d bytes, original %v, %v", keepDigest, len(got), string(got) == original, err)
		}
		obj, err := d.conn("operator").client().Outputs().FetchDirect(testCtx(t), ref)
		must(t, err)
		if got, err := io.ReadAll(obj); err != nil || string(got) != original {
			t.Fatalf("the operator's direct read after a forged overwrite: %d bytes, %v", len(got), err)
		}
	}
}

// forge publishes, as a writer may, forged chunks and metadata for object
// r naming the victim's session and call, with the Nats-Rollup header
// rollup unless it is ""; keepDigest repeats the reference's digest in the
// forged metadata. It returns the metadata publish's error.
func forge(t *testing.T, nc *nats.Conn, r offload.Ref, keepDigest bool, rollup string) error {
	t.Helper()
	js := testkit.JetStream(t, nc)
	ctx := testCtx(t)
	data := []byte(strings.Repeat("FORGED", 1000))
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "$O.toolbus_outputs.C.forgedchunks" + r.Digest[:8], Data: data}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	digest := "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])
	if keepDigest {
		want, _ := hex.DecodeString(r.Digest)
		digest = "SHA-256=" + base64.URLEncoding.EncodeToString(want)
	}
	parts := strings.SplitN(r.Name, ".", 4)
	info := jetstream.ObjectInfo{ObjectMeta: jetstream.ObjectMeta{Name: r.Name, Headers: nats.Header{
		offload.HeaderSession: {parts[0]}, offload.HeaderCall: {strings.Join(parts[:3], ".")}, "Content-Type": {"text/plain"}}},
		Bucket: "toolbus_outputs", NUID: "forgedchunks" + r.Digest[:8], Size: uint64(len(data)), Chunks: 1, Digest: digest}
	raw, err := json.Marshal(info)
	must(t, err)
	m := nats.NewMsg("$O.toolbus_outputs.M." + base64.URLEncoding.EncodeToString([]byte(r.Name)))
	if rollup != "" {
		m.Header.Set(jetstream.MsgRollup, rollup)
	}
	m.Data = raw
	_, err = js.PublishMsg(ctx, m)
	return err
}

// TestOutputOfAnotherCallRefused: a worker's result that refers to a
// stored output of another call (another session's, or its own session's
// other call) is a tool_error that says so, and an external answer that
// does the same is refused with bad_request (the call stays parked).
func TestOutputOfAnotherCallRefused(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	s1 := d.conn("session-s1")
	ref := bigRef(t, s1.client(), "victim")

	wl := d.conn("worker")
	w, err := worker.New(wl.nc, worker.Config{Heartbeat: testHeartbeat})
	must(t, err)
	must(t, w.Handle(bus.ToolDef{Name: "steal", Description: "Returns another call's output.", ReadOnly: true,
		InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)},
		func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return &bus.ExecResult{Output: []bus.Block{{Type: bus.BlockData, MediaType: "text/plain", URL: ref}}}, nil
		}))
	must(t, w.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Drain(ctx)
	})
	testkit.Recv(t, w.Registered(), bound, "the worker's registration")
	for _, who := range []string{"session-s2", "session-s1"} {
		session := strings.TrimPrefix(who, "session-")
		reply, err := d.conn(who).client().Call(testCtx(t), session, bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "steal"}}})
		must(t, err)
		res := reply.Results[0]
		if res.Error == nil || res.Error.Code != bus.CodeToolError || !strings.Contains(res.Error.Message, "does not start with the call's key") {
			t.Fatalf("%s: a result with another call's output: %.500v", who, res)
		}
	}

	// An external answer with another call's output.
	reply, err := s1.client().Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c3", Name: "pick"}}}, client.WithReplyID("r3"))
	must(t, err)
	if len(reply.Parked) != 1 {
		t.Fatalf("pick did not park: %+v", reply)
	}
	hl := d.conn("handler-picker")
	err = hl.client().Parked().Answer(testCtx(t), "pick", "s1", "r3", "c3", bus.Answer{State: bus.StateSuccess,
		Output: []bus.Block{{Type: bus.BlockData, MediaType: "text/plain", URL: ref}}})
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, "does not start with the call's key") {
		t.Fatalf("an answer with another call's output: %v", err)
	}
	// A large answer of its own goes through, and s1 reads it back.
	big := strings.Repeat("answer ", 300<<10)
	must(t, hl.client().Parked().Answer(testCtx(t), "pick", "s1", "r3", "c3", bus.Answer{State: bus.StateSuccess, Output: bus.Text(big)}))
	var parked struct {
		Parked []bus.Parked `json:"parked"`
	}
	must(t, d.conn("operator").client().Admin(testCtx(t), "parked.list", "s1", struct{}{}, &parked))
	if len(parked.Parked) != 0 {
		t.Fatalf("still parked: %+v", parked)
	}
	hl.noViolations()
}
