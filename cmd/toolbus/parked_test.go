package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

// conn opens a connection to the deployment, closed when the test ends.
func (d *deployment) conn(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(d.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// registerDefs registers definitions the way a worker would, with a raw
// io.toolbus.register request from a registrar that serves none of them
// (external tools need no worker). They allow themselves and are
// concurrency-safe, as in test/embedded. It waits until they are listed.
func (d *deployment) registerDefs(t *testing.T, defs ...bus.ToolDef) {
	t.Helper()
	names := make([]string, len(defs))
	for i := range defs {
		defs[i].Permission = bus.PermissionAllow
		defs[i].ConcurrencySafe = true
		if len(defs[i].InputSchema) == 0 {
			defs[i].InputSchema = json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)
		}
		names[i] = defs[i].Name
	}
	e, err := bus.NewEvent(bus.TypeRegister, "test/registrar", bus.Register{Worker: "registrar", Tools: defs})
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Msg(d.client.Subjects().Workers.SharedRegister()) // several tools in one: the 1.11 subject, still served
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := d.conn(t).RequestMsgWithContext(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := bus.Decode(resp)
	if err != nil {
		t.Fatal(err)
	}
	var ack bus.RegisterAck
	if err := ev.DataAs(&ack); err != nil || ev.Type != bus.TypeRegisterAck || len(ack.Rejected) > 0 {
		t.Fatalf("register: %s %s %v", ev.Type, ev.Data, err)
	}
	d.waitListed(t, names...)
}

// waitListed polls until the tools are listed for a session's model.
func (d *deployment) waitListed(t *testing.T, names ...string) {
	t.Helper()
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		list, err := d.client.Tools(t.Context(), "any", bus.FormatToolbus, nil)
		if err != nil {
			return err
		}
		listed := map[string]bool{}
		for _, raw := range list.Tools {
			name, _ := toolEntry(raw)
			listed[name] = true
		}
		for _, n := range names {
			if !listed[n] {
				return fmt.Errorf("tool %s is not listed", n)
			}
		}
		return nil
	})
}

type writeIn struct {
	V int `json:"v"`
}

// addWriteTool starts a worker serving "write", a tool that is not
// read-only and has the default permission check, so in the default mode
// it asks. It returns the count of its runs.
func (d *deployment) addWriteTool(t *testing.T) *atomic.Int32 {
	t.Helper()
	runs := new(atomic.Int32)
	_, err := d.x.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "write", Description: "Write v."},
			func(_ context.Context, _ *worker.Call, in writeIn) (string, error) {
				runs.Add(1)
				return fmt.Sprintf("wrote %d", in.V), nil
			})
	}})
	if err != nil {
		t.Fatal(err)
	}
	d.waitListed(t, "write")
	return runs
}

// watchSession streams a session's events until the test ends.
func (d *deployment) watchSession(t *testing.T, session string) *client.Events {
	t.Helper()
	events, err := d.client.Watch(t.Context(), session)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, events.Stop)
	return events
}

// waitDone returns the results of reply's io.toolbus.batch.done event.
func waitDone(t *testing.T, events *client.Events, replyID string) []bus.Result {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-events.C:
			var d bus.BatchDone
			if e.Type == bus.TypeBatchDone && e.ReplyID == replyID && e.DataAs(&d) == nil {
				return d.Results
			}
		case <-timeout:
			t.Fatalf("no batch.done for reply %s", replyID)
		}
	}
}

// park calls tool once in session with reply id replyID and call id "c1",
// and checks that the call parked as kind.
func (d *deployment) park(t *testing.T, session, replyID, tool, input, kind string) bus.Parked {
	t.Helper()
	reply, err := d.client.Call(t.Context(), session, bus.Batch{Calls: []bus.Call{{ID: "c1", Name: tool, Input: json.RawMessage(input)}}},
		client.WithReplyID(replyID))
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Results) != 0 || len(reply.Parked) != 1 || reply.Parked[0].Kind != kind {
		t.Fatalf("reply: %+v", reply)
	}
	return reply.Parked[0]
}

// background runs the command line until the returned stop is called, and
// returns its stdout and stderr; stop returns its error.
func background(t *testing.T, args ...string) (stdout, stderr *testkit.Buffer, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	stdout, stderr = new(testkit.Buffer), new(testkit.Buffer)
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, stdout, stderr) }()
	return stdout, stderr, func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("the command did not return after cancel")
		}
	}
}

// waitOutput polls until b holds want.
func waitOutput(t *testing.T, b *testkit.Buffer, want string) {
	t.Helper()
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if !strings.Contains(b.String(), want) {
			return fmt.Errorf("no %q in:\n%s", want, b.String())
		}
		return nil
	})
}

func wantErrCode(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), code) || !errors.Is(err, &bus.Error{Code: code}) {
		t.Fatalf("error %v, want one naming %s", err, code)
	}
}

func TestParkedAnswer(t *testing.T) {
	d := newDeployment(t)
	d.registerDefs(t, bus.ToolDef{Name: "approve_po", Description: "A person approves a purchase order.", External: true})
	events := d.watchSession(t, "s1")
	d.park(t, "s1", "r1", "approve_po", `{"q":"PO-7"}`, bus.KindExternal)

	out, _, err := exec(t.Context(), "parked", "--session", "s1", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "SESSION REPLY CALL TOOL KIND AGE INPUT" {
		t.Fatalf("parked output:\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) != 7 || strings.Join(f[:5], " ") != "s1 r1 c1 approve_po external" || f[6] != `{"q":"PO-7"}` {
		t.Fatalf("parked line %q", lines[1])
	}
	out, _, err = exec(t.Context(), "parked", "--all", "--json", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Parked []bus.ParkedCall `json:"parked"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Parked) != 1 || list.Parked[0].Session != "s1" || list.Parked[0].ID != "c1" {
		t.Fatalf("parked --all --json: %v\n%s", err, out)
	}
	out, errOut, err := exec(t.Context(), "parked", "--session", "other", "--nats", d.url)
	if err != nil || out != "" || errOut != "no parked calls in session other\n" {
		t.Fatalf("parked of another session: %v %q %q", err, out, errOut)
	}

	// A handler that starts only now still sees the request.
	stdout, stderr, stop := background(t, "watch-handoff", "approve_po", "--nats", d.url)
	waitOutput(t, stdout, ` s1 r1 c1 approve_po {"q":"PO-7"}`+"\n")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "following toolbus.external.approve_po, the calls parked in bucket toolbus_parked") {
		t.Errorf("stderr: %s", stderr.String())
	}

	out, _, err = exec(t.Context(), "answer", "c1", `[{"type":"text","text":"approved"}]`, "--session", "s1", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	if out != "answered call c1 of approve_po (reply r1, session s1): success\n" {
		t.Fatalf("answer output %q", out)
	}
	res := waitDone(t, events, "r1")
	if len(res) != 1 || res[0].State != bus.StateSuccess || len(res[0].Output) != 1 || res[0].Output[0].Text != "approved" {
		t.Fatalf("batch.done results %+v", res)
	}
	// The router refuses a second answer; without --reply and --tool the
	// call is no longer found among the parked ones.
	_, _, err = exec(t.Context(), "answer", "c1", "again", "--reply", "r1", "--tool", "approve_po", "--session", "s1", "--nats", d.url)
	wantErrCode(t, err, bus.CodeAlreadyAnswered)
	_, _, err = exec(t.Context(), "answer", "c1", "again", "--session", "s1", "--nats", d.url)
	wantErrCode(t, err, bus.CodeNotParked)
	out, errOut, err = exec(t.Context(), "parked", "--all", "--nats", d.url)
	if err != nil || out != "" || errOut != "no parked calls in any session\n" {
		t.Fatalf("parked after the answer: %v %q %q", err, out, errOut)
	}
}

func TestAnswerErrorAndAmbiguous(t *testing.T) {
	d := newDeployment(t)
	d.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	events := d.watchSession(t, "s2")
	d.park(t, "s2", "r2", "ext", `{}`, bus.KindExternal)
	d.park(t, "s2", "r3", "ext", `{"q":"x"}`, bus.KindExternal)

	_, _, err := exec(t.Context(), "answer", "c1", "x", "--session", "s2", "--nats", d.url)
	if err == nil || !strings.Contains(err.Error(), "ambiguous") || !strings.Contains(err.Error(), "reply r2 (ext)") || !strings.Contains(err.Error(), "reply r3 (ext)") || !strings.Contains(err.Error(), "--reply") {
		t.Fatalf("ambiguous answer: %v", err)
	}
	_, _, err = exec(t.Context(), "answer", "c9", "x", "--session", "s2", "--nats", d.url)
	wantErrCode(t, err, bus.CodeNotParked)

	out, _, err := exec(t.Context(), "answer", "c1", "no budget", "--error", "--reply", "r2", "--session", "s2", "--nats", d.url)
	if err != nil || out != "answered call c1 of ext (reply r2, session s2): error\n" {
		t.Fatalf("answer --error: %v %q", err, out)
	}
	res := waitDone(t, events, "r2")
	if len(res) != 1 || res[0].State != bus.StateError || res[0].Error == nil || res[0].Error.Code != bus.CodeToolError || res[0].Output[0].Text != "no budget" {
		t.Fatalf("batch.done results %+v", res)
	}
	// An answer the router finds bad is refused with its code.
	_, _, err = exec(t.Context(), "answer", "c1", `[{"type":"image","data":"AA=="}]`, "--reply", "r3", "--session", "s2", "--nats", d.url)
	wantErrCode(t, err, bus.CodeBadRequest)
	// The call now has one place: no --reply needed.
	if _, _, err := exec(t.Context(), "answer", "c1", "fine", "--session", "s2", "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	if res := waitDone(t, events, "r3"); res[0].State != bus.StateSuccess || res[0].Output[0].Text != "fine" {
		t.Fatalf("batch.done results %+v", res)
	}
}

func TestConfirm(t *testing.T) {
	d := newDeployment(t)
	runs := d.addWriteTool(t)
	events := d.watchSession(t, "s3")
	p := d.park(t, "s3", "r1", "write", `{"v":1}`, bus.KindConfirm)
	if len(p.SuggestedRules) != 1 || p.SuggestedRules[0].Tool != "write" {
		t.Fatalf("parked %+v", p)
	}

	stdout, _, stop := background(t, "watch-handoff", "write", "--confirm", "--session", "s3", "--nats", d.url)
	waitOutput(t, stdout, ` s3 r1 c1 write {"v":1} — asks: `)
	waitOutput(t, stdout, "; --remember adds: allow write\n")
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	_, _, err := exec(t.Context(), "answer", "c1", "done", "--session", "s3", "--nats", d.url)
	if err == nil || !strings.Contains(err.Error(), "parked for a confirmation") || !strings.Contains(err.Error(), "toolbus confirm") {
		t.Fatalf("answer to a confirmation: %v", err)
	}
	out, _, err := exec(t.Context(), "confirm", "c1", "--remember", "--session", "s3", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	if out != "confirmed call c1 of write (reply r1, session s3); remembered: allow write\n" {
		t.Fatalf("confirm output %q", out)
	}
	res := waitDone(t, events, "r1")
	if len(res) != 1 || res[0].State != bus.StateSuccess || res[0].Output[0].Text != "wrote 1" || runs.Load() != 1 {
		t.Fatalf("batch.done results %+v, %d runs", res, runs.Load())
	}
	// Remembered: the same call runs without asking.
	reply, err := d.client.Call(t.Context(), "s3", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "write", Input: json.RawMessage(`{"v":1}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Parked) != 0 || len(reply.Results) != 1 || reply.Results[0].State != bus.StateSuccess || runs.Load() != 2 {
		t.Fatalf("second call: %+v", reply)
	}
	out, _, err = exec(t.Context(), "session", "show", "--session", "s3", "--nats", d.url)
	if err != nil || !strings.Contains(out, "\nrules:\n  allow write\n") {
		t.Fatalf("session show: %v\n%s", err, out)
	}

	// Denied, in a session without the rule.
	events4 := d.watchSession(t, "s4")
	d.park(t, "s4", "r2", "write", `{"v":2}`, bus.KindConfirm)
	out, _, err = exec(t.Context(), "confirm", "c1", "--deny", "--session", "s4", "--nats", d.url)
	if err != nil || out != "denied call c1 of write (reply r2, session s4)\n" {
		t.Fatalf("confirm --deny: %v %q", err, out)
	}
	res = waitDone(t, events4, "r2")
	if len(res) != 1 || res[0].State != bus.StateDenied || res[0].Error == nil || res[0].Error.Code != bus.CodeDenied ||
		res[0].Output[0].Text != `<system-reminder>The execution of tool "write" is denied by user!</system-reminder>` {
		t.Fatalf("batch.done results %+v", res)
	}
	if runs.Load() != 2 {
		t.Fatalf("a denied call ran: %d runs", runs.Load())
	}
	_, _, err = exec(t.Context(), "confirm", "c1", "--reply", "r2", "--tool", "write", "--session", "s4", "--nats", d.url)
	wantErrCode(t, err, bus.CodeAlreadyAnswered)
}

// TestConfirmEditedInput checks --input: the call runs with the edited
// input, and a bad edit is refused and changes nothing.
func TestConfirmEditedInput(t *testing.T) {
	d := newDeployment(t)
	d.addWriteTool(t)
	events := d.watchSession(t, "s5")
	d.park(t, "s5", "r1", "write", `{"v":1}`, bus.KindConfirm)
	_, _, err := exec(t.Context(), "confirm", "c1", "--input", `{"v":"x"}`, "--session", "s5", "--nats", d.url)
	wantErrCode(t, err, bus.CodeBadRequest)
	if _, _, err := exec(t.Context(), "confirm", "c1", "--input", `{"v":42}`, "--session", "s5", "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	if res := waitDone(t, events, "r1"); res[0].State != bus.StateSuccess || res[0].Output[0].Text != "wrote 42" {
		t.Fatalf("batch.done results %+v", res)
	}
}

func TestParseOutput(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []bus.Block
	}{
		{"approved", bus.Text("approved")},
		{"", bus.Text("")},
		{`[{"type":"text","text":"a"},{"type":"data","media_type":"image/png","data":"AA=="}]`,
			[]bus.Block{{Type: bus.BlockText, Text: "a"}, {Type: bus.BlockData, MediaType: "image/png", Data: "AA=="}}},
		{` [] `, []bus.Block{}},
		{`["a"]`, bus.Text(`["a"]`)},
		{`[{"text":"no type"}]`, bus.Text(`[{"text":"no type"}]`)},
		{`[{"type":"text","txt":"typo"}]`, bus.Text(`[{"type":"text","txt":"typo"}]`)},
		{`[{"type":"text","text":"a"}] trailing`, bus.Text(`[{"type":"text","text":"a"}] trailing`)},
		{`{"type":"text","text":"an object"}`, bus.Text(`{"type":"text","text":"an object"}`)},
		{`[1, 2`, bus.Text(`[1, 2`)},
	} {
		got := parseOutput(tc.in)
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(tc.want)
		if string(g) != string(w) || got == nil {
			t.Errorf("parseOutput(%q) = %s, want %s", tc.in, g, w)
		}
	}
}

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                  "0s",
		1500 * time.Millisecond:       "1s",
		59 * time.Second:              "59s",
		5*time.Minute + 7*time.Second: "5m07s",
		3*time.Hour + 2*time.Minute:   "3h02m",
		50 * time.Hour:                "2d02h",
	} {
		if got := age(d); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestRenderParked(t *testing.T) {
	now := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	var out strings.Builder
	renderParked(&out, []bus.ParkedCall{
		{Session: "s1", ReplyID: "r1", ID: "c1", Name: "approve_po", Kind: bus.KindExternal, Input: json.RawMessage(`{ "q": "PO 7" }`), Created: now.Add(-90 * time.Second)},
		{Session: "session-two", ReplyID: "r2", ID: "c2", Name: "write", Kind: bus.KindConfirm, Created: now},
		{Session: "s1", ReplyID: "r3", ID: "c3", Name: "write", Kind: bus.KindConfirm, InputOmitted: true, InputDigest: "sha256:ab", Created: now},
	}, now)
	want := `SESSION      REPLY  CALL  TOOL        KIND      AGE    INPUT
s1           r1     c1    approve_po  external  1m30s  {"q":"PO 7"}
session-two  r2     c2    write       confirm   0s     {}
s1           r3     c3    write       confirm   0s     (larger than a reply can carry; input_digest sha256:ab)
`
	if out.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestRequestLine(t *testing.T) {
	e := event(t, bus.TypeConfirmReq, map[string]any{
		"call":            bus.Call{ID: "c1", Name: "shell", Input: json.RawMessage(`{"command": "git status"}`)},
		"reason":          "no rule allows this call of shell",
		"suggested_rules": []bus.Rule{{Tool: "shell", Pattern: "git:*", Behavior: "allow"}},
		"subject":         "toolbus.answer.shell",
	})
	e.ToolCallID = "c1"
	line := requestLine(e)
	want := ` s1 r1 c1 shell {"command":"git status"} — asks: no rule allows this call of shell; --remember adds: allow shell(git:*)`
	if !strings.HasSuffix(line, want) || !strings.Contains(line, ":12.345 ") {
		t.Fatalf("line %q", line)
	}
	e = event(t, bus.TypeExternalReq, map[string]any{"call": bus.Call{ID: "c1", Name: "approve_po"}})
	if line := requestLine(e); !strings.HasSuffix(line, " s1 r1 - approve_po {}") {
		t.Fatalf("line %q", line)
	}
}

func TestUsageParked(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in the error
	}{
		{"groups argument", []string{"groups", "x"}, "no arguments"},
		{"reset bad session", []string{"reset", "ops", "--session", "a.b"}, "--session"},
		{"session nothing", []string{"session"}, "needs show or mode"},
		{"session unknown", []string{"session", "drop"}, `unknown session command "drop"`},
		{"session show extra", []string{"session", "show", "x"}, "no arguments"},
		{"session mode none", []string{"session", "mode"}, "one mode"},
		{"session bad mode", []string{"session", "mode", "yolo"}, `unknown mode "yolo"`},
		{"activate nothing", []string{"activate"}, "at least one group"},
		{"activate bad name", []string{"activate", "a.b"}, `group name "a.b"`},
		{"parked two arguments", []string{"parked", "x", "y"}, "at most a call id"},
		{"parked bad id", []string{"parked", "c.1"}, `call id "c.1"`},
		{"answer no output", []string{"answer", "c1"}, "got 1 arguments"},
		{"answer bad id", []string{"answer", "c.1", "x"}, `call id "c.1"`},
		{"answer bad reply", []string{"answer", "c1", "x", "--reply", "r 1"}, "--reply"},
		{"answer bad tool", []string{"answer", "c1", "x", "--tool", "a.b"}, "--tool"},
		{"confirm nothing", []string{"confirm"}, "got 0 arguments"},
		{"confirm deny input", []string{"confirm", "c1", "--deny", "--input", "{}"}, "cannot go with --deny"},
		{"confirm deny remember", []string{"confirm", "c1", "--deny", "--remember"}, "cannot go with --deny"},
		{"confirm bad input", []string{"confirm", "c1", "--input", "{v"}, "is not JSON"},
		{"watch-handoff nothing", []string{"watch-handoff"}, "got 0 arguments"},
		{"watch-handoff bad tool", []string{"watch-handoff", "a.b"}, `tool name "a.b"`},
		{"watch-handoff bad session", []string{"watch-handoff", "t", "--session", "a.b"}, "--session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, err := exec(t.Context(), tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if !strings.Contains(errOut, "usage: toolbus") {
				t.Fatalf("no usage on stderr:\n%s", errOut)
			}
		})
	}
}

// TestCallIDFindsItsSession: answer, confirm, parked and cancel need no
// --session: the call (or reply) id finds its session among the parked
// calls of every session. An id parked in two sessions is ambiguous, and
// the error names the sessions and --session.
func TestCallIDFindsItsSession(t *testing.T) {
	d := newDeployment(t)
	d.registerDefs(t, bus.ToolDef{Name: "ext", External: true})
	runs := d.addWriteTool(t)
	ext := d.watchSession(t, "s7")
	d.park(t, "s7", "r7", "ext", `{"q":"a"}`, bus.KindExternal)

	out, _, err := exec(t.Context(), "parked", "c1", "--nats", d.url)
	if err != nil || !strings.Contains(out, "s7  ") || !strings.Contains(out, "next: toolbus answer c1 '<output>'\n") {
		t.Fatalf("parked c1: %v\n%s", err, out)
	}
	if _, _, err := exec(t.Context(), "parked", "c9", "--nats", d.url); !errors.Is(err, bus.ErrNotParked) {
		t.Fatalf("parked c9: %v", err)
	}
	out, _, err = exec(t.Context(), "answer", "c1", "yes", "--nats", d.url)
	if err != nil || out != "answered call c1 of ext (reply r7, session s7): success\n" {
		t.Fatalf("answer without --session: %v %q", err, out)
	}
	if res := waitDone(t, ext, "r7"); res[0].Output[0].Text != "yes" {
		t.Fatalf("results %+v", res)
	}

	conf := d.watchSession(t, "s8")
	d.park(t, "s8", "r8", "write", `{"v":1}`, bus.KindConfirm)
	out, _, err = exec(t.Context(), "confirm", "c1", "--nats", d.url)
	if err != nil || out != "confirmed call c1 of write (reply r8, session s8)\n" {
		t.Fatalf("confirm without --session: %v %q", err, out)
	}
	if res := waitDone(t, conf, "r8"); res[0].State != bus.StateSuccess || runs.Load() != 1 {
		t.Fatalf("results %+v", res)
	}

	// The same call id parked in two sessions: ambiguous, say where.
	d.park(t, "s9", "r9", "ext", `{}`, bus.KindExternal)
	d.park(t, "s10", "r10", "ext", `{}`, bus.KindExternal)
	_, _, err = exec(t.Context(), "answer", "c1", "x", "--nats", d.url)
	if err == nil || !strings.Contains(err.Error(), "ambiguous") || !strings.Contains(err.Error(), "session s9 reply r9") ||
		!strings.Contains(err.Error(), "session s10 reply r10") || !strings.Contains(err.Error(), "--session") {
		t.Fatalf("ambiguous answer: %v", err)
	}
	out, _, err = exec(t.Context(), "parked", "c1", "--nats", d.url)
	if err != nil || !strings.Contains(out, "next: toolbus answer c1 '<output>' --session s9 --reply r9\n") {
		t.Fatalf("parked c1 in two sessions: %v\n%s", err, out)
	}
	// A parked reply's id finds its session for cancel.
	out, _, err = exec(t.Context(), "cancel", "r10", "--nats", d.url)
	if err != nil || out != "cancelled: c1 of reply r10 in session s10\n" {
		t.Fatalf("cancel without --session: %v %q", err, out)
	}
	out, _, err = exec(t.Context(), "answer", "c1", "now one", "--nats", d.url)
	if err != nil || !strings.Contains(out, "session s9") {
		t.Fatalf("answer after the cancel: %v %q", err, out)
	}
}

// TestParkedPages: toolbus parked lists calls whose inputs together pass
// the server's max payload (parked.list in pages, an input left out of
// its page read on its own), every one once and whole.
func TestParkedPages(t *testing.T) {
	d := newDeployment(t)
	d.registerDefs(t, bus.ToolDef{Name: "approve_po", Description: "A person approves a purchase order.", External: true})
	const each = 1 << 19
	big := `{"q":"` + strings.Repeat("x", each) + `"}`
	n := int(d.conn(t).MaxPayload())/each + 1
	for i := range n {
		d.park(t, "big", fmt.Sprintf("r%d", i), "approve_po", big, bus.KindExternal)
	}
	d.park(t, "small", "r1", "approve_po", `{"q":"PO-7"}`, bus.KindExternal)
	// A deadline for the walk, not the client's 10 s a page: each page of
	// about the max payload took over 10 s under -race at load 22 (hunt41);
	// what this test guards is every call listed once and whole, not time.
	out, _, err := exec(testkit.Within(t, 10*time.Minute), "parked", "--all", "--json", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Parked []bus.ParkedCall `json:"parked"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Parked) != n+1 {
		t.Fatalf("parked --all --json: %v, %d calls listed, want %d", err, len(list.Parked), n+1)
	}
	seen := map[string]bool{}
	for _, p := range list.Parked {
		key := bus.CallKey(p.Session, p.ReplyID, p.ID)
		if seen[key] || p.InputOmitted || p.Session == "big" && len(p.Input) < each {
			t.Fatalf("%s: listed again %v, input omitted %v, %d bytes", key, seen[key], p.InputOmitted, len(p.Input))
		}
		seen[key] = true
	}
}

// A router whose pages repeat a cursor cannot keep `toolbus parked` going
// forever: the walk ends with an error once a cursor is asked for again.
func TestAttackParkedPagesThatDoNotAdvance(t *testing.T) {
	x := xtest.Run(t, xtest.Config{})
	nc, err := nats.Connect(x.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	call := bus.ParkedCall{Session: "s", ReplyID: "r1", ID: "c1", Name: "approve_po", Kind: bus.KindExternal, Created: time.Now()}
	var asked atomic.Int32
	sub, err := nc.Subscribe(bus.NewSubjects("").Admin("parked.list"), func(m *nats.Msg) {
		asked.Add(1) // every page lists the call and points back at its cursor
		_ = bus.Respond(nc, m, "toolbus/router/fake", bus.TypeAdminReply, bus.ParkedPage{Parked: []bus.ParkedCall{call}, Next: call.Cursor()})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	_, _, err = exec(t.Context(), "parked", "--all", "--json", "--nats", x.URL(0))
	if err == nil || !strings.Contains(err.Error(), "did not advance") || asked.Load() != 2 {
		t.Fatalf("parked over pages that repeat: %v after %d pages, want the walk ended after 2", err, asked.Load())
	}
}
