package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/schemas"
)

// batchEvent is an io.toolbus.call.batch event with data, as decode leaves it.
func batchEvent(t *testing.T, id string, data string, mutate ...func(*bus.Event)) *bus.Event {
	t.Helper()
	e, err := bus.NewEvent(bus.TypeCallBatch, "test", json.RawMessage(data))
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID = id, "s1"
	for _, m := range mutate {
		m(e)
	}
	return e
}

var testLimits = Limits{MaxCalls: bus.MaxCalls, MaxInputBytes: 128, MaxParked: 10}

func TestCheckTurn(t *testing.T) {
	many := `{"calls":[` + strings.TrimSuffix(strings.Repeat(`{"id":"c","name":"echo","input":{}},`, bus.MaxCalls+1), ",") + `]}`
	var ten []string // ten calls, the last with the first's id: found by the map, past 8 calls
	for i := range 10 {
		ten = append(ten, fmt.Sprintf(`{"id":"c%d","name":"echo","input":{}}`, i%9))
	}
	tenDup := `{"calls":[` + strings.Join(ten, ",") + `]}`
	for _, tc := range []struct {
		name   string
		id     string
		data   string
		mutate func(*bus.Event)
		code   string // "" when the turn is accepted
		want   string // a piece of the message
	}{
		{"one call", "r1", `{"calls":[{"id":"c1","name":"echo","input":{}}]}`, nil, "", ""},
		{"bad reply id", "r 1", `{"calls":[{"id":"c1","name":"echo","input":{}}]}`, nil, bus.CodeBadEvent, "reply id"},
		{"no calls", "r1", `{"calls":[]}`, nil, bus.CodeBadRequest, "no calls"},
		{"too many calls", "r1", many, nil, bus.CodeBadRequest, "at most"},
		{"bad call id", "r1", `{"calls":[{"id":"c/1","name":"echo","input":{}}]}`, nil, bus.CodeBadEvent, "call id"},
		{"duplicate call id", "r1", `{"calls":[{"id":"c1","name":"a","input":{}},{"id":"c1","name":"b","input":{}}]}`, nil, bus.CodeBadRequest, "twice"},
		{"duplicate call id past eight calls", "r1", tenDup, nil, bus.CodeBadRequest, `"c0" appears twice`},
		{"unknown batch member is read leniently", "r1", `{"calls":[{"id":"c1","name":"echo","input":{}}],"extra":1}`, nil, "", ""},
		{"unknown request member is refused", "r1", `{"calls":[{"id":"c1","name":"echo","input":{}}],"request":{"tools":[]}}`, nil, bus.CodeBadRequest, `unknown member "tools"`},
		{"bad expiry", "r1", `{"calls":[{"id":"c1","name":"echo","input":{}}]}`, func(e *bus.Event) { e.ExpiryTime = "tomorrow" }, bus.CodeBadEvent, "expirytime"},
		{"input too large", "r1", `{"calls":[{"id":"c1","name":"echo","input":{"text":"` + strings.Repeat("x", 200) + `"}}]}`, nil, bus.CodeBadRequest, "at most 128 are allowed"},
		{"events calls", "r1", `{"calls":[{"id":"c1","name":"echo","input":{}}],"events":"calls"}`, nil, "", ""},
		{"events batch", "r1", `{"calls":[{"id":"c1","name":"echo","input":{}}],"events":"batch"}`, nil, "", ""},
		{"bad events", "r1", `{"calls":[{"id":"c1","name":"echo","input":{}}],"events":"each"}`, nil, bus.CodeBadRequest, `events "each"`},
		{"bad request mode", "r1", `{"calls":[{"id":"c1","name":"echo","input":{}}],"request":{"mode":"sideways"}}`, nil, bus.CodeBadRequest, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mutate []func(*bus.Event)
			if tc.mutate != nil {
				mutate = append(mutate, tc.mutate)
			}
			got, err := checkTurn(batchEvent(t, tc.id, tc.data, mutate...), testLimits, nil, nil)
			if tc.code == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				if got.session != "s1" || got.replyID != tc.id || len(got.data.Calls) != 1 || got.req == nil {
					t.Fatalf("turn %+v", got)
				}
				return
			}
			be, ok := err.(*bus.Error)
			if !ok || be.Code != tc.code || !strings.Contains(be.Message, tc.want) {
				t.Fatalf("error %v, want %s containing %q", err, tc.code, tc.want)
			}
		})
	}
	// The expiry becomes the turn's deadline.
	tn, err := checkTurn(batchEvent(t, "r1", `{"calls":[{"id":"c1","name":"echo","input":{}}]}`,
		func(e *bus.Event) { e.ExpiryTime = "2030-01-02T03:04:05Z" }), testLimits, nil, nil)
	if err != nil || !tn.deadline.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("deadline %v, %v", tn.deadline, err)
	}
}

func TestNextRun(t *testing.T) {
	// docs/protocol.md 5.2: maximal stretches of concurrency-safe calls run
	// together; an unsafe call runs alone.
	for _, tc := range []struct {
		safe string // one letter per call: s safe, u unsafe
		runs string // the plan, runs separated by |
	}{
		{"s", "s"},
		{"u", "u"},
		{"sss", "sss"},
		{"uuu", "u|u|u"},
		{"ssuss", "ss|u|ss"},
		{"usu", "u|s|u"},
		{"suus", "s|u|u|s"},
	} {
		t.Run(tc.safe, func(t *testing.T) {
			safe := func(k int) bool { return tc.safe[k] == 's' }
			var runs []string
			for i := 0; i < len(tc.safe); {
				j := nextRun(i, len(tc.safe), safe)
				runs = append(runs, tc.safe[i:j])
				i = j
			}
			if got := strings.Join(runs, "|"); got != tc.runs {
				t.Fatalf("plan %s, want %s", got, tc.runs)
			}
		})
	}
}

func tool(t *testing.T, def bus.ToolDef) *registry.Tool {
	t.Helper()
	if def.InputSchema == nil {
		def.InputSchema = json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"command":{"type":"string"}}}`)
	}
	s, err := schemas.Compile(def.InputSchema)
	if err != nil {
		t.Fatal(err)
	}
	return &registry.Tool{Def: def, Schema: s}
}

func TestDecide(t *testing.T) {
	call := bus.Call{ID: "c1", Name: "x"}
	readOnly := tool(t, bus.ToolDef{Name: "read", ReadOnly: true})
	write := tool(t, bus.ToolDef{Name: "write"})
	allowed := tool(t, bus.ToolDef{Name: "deploy", Permission: bus.PermissionAllow})
	asks := tool(t, bus.ToolDef{Name: "deploy", Permission: bus.PermissionAsk})
	ext := tool(t, bus.ToolDef{Name: "ticket", External: true, Permission: bus.PermissionAllow})
	reqScoped := groups.Resolved{External: &groups.RequestTool{Def: bus.ToolDef{Name: "ui"}}}
	input := json.RawMessage(`{}`)
	for _, tc := range []struct {
		name   string
		mode   string
		rules  []bus.Rule
		target groups.Resolved
		want   string // run, deny, confirm, external
	}{
		{"reset_tools is never asked", permission.Explore, nil, groups.Resolved{Reset: true}, "run"},
		{"the skill loader is never asked", permission.DontAsk, nil, groups.Resolved{Skill: true, Tool: readOnly}, "run"},
		{"a request-scoped tool parks for the agent", permission.Explore, nil, reqScoped, "external"},
		{"read-only runs in default", permission.Default, nil, groups.Resolved{Tool: readOnly}, "run"},
		{"read-only runs in explore", permission.Explore, nil, groups.Resolved{Tool: readOnly}, "run"},
		{"explore denies a write", permission.Explore, nil, groups.Resolved{Tool: write}, "deny"},
		{"default asks for a write", permission.Default, nil, groups.Resolved{Tool: write}, "confirm"},
		{"dont_ask denies what would ask", permission.DontAsk, nil, groups.Resolved{Tool: write}, "deny"},
		{"bypass runs a write", permission.Bypass, nil, groups.Resolved{Tool: write}, "run"},
		{"a tool that allows itself runs", permission.Default, nil, groups.Resolved{Tool: allowed}, "run"},
		{"a tool that asks asks", permission.Default, nil, groups.Resolved{Tool: asks}, "confirm"},
		{"an allow rule runs a write", permission.Default, []bus.Rule{{Tool: "write", Behavior: "allow"}}, groups.Resolved{Tool: write}, "run"},
		{"a deny rule beats bypass", permission.Bypass, []bus.Rule{{Tool: "write", Behavior: "deny"}}, groups.Resolved{Tool: write}, "deny"},
		{"an ask rule asks even for read-only", permission.Default, []bus.Rule{{Tool: "read", Behavior: "ask"}}, groups.Resolved{Tool: readOnly}, "confirm"},
		{"an allowed external tool parks for its handler", permission.Default, nil, groups.Resolved{Tool: ext}, "external"},
		{"a denied external tool is denied", permission.Explore, nil, groups.Resolved{Tool: ext}, "deny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, res := decide(permission.Context{Mode: tc.mode, Rules: tc.rules}, tc.target, call, input)
			got := "run"
			switch {
			case res != nil:
				if res.Error == nil || res.Error.Code != bus.CodeDenied {
					t.Fatalf("result %+v, want a denial", res)
				}
				got = "deny"
			case spec.kind == bus.KindConfirm:
				got = "confirm"
				if spec.reason == "" {
					t.Fatal("a confirmation without a reason")
				}
			case spec.kind == bus.KindExternal:
				got = "external"
				if spec.requestScoped != (tc.target.External != nil) {
					t.Fatalf("request-scoped %v", spec.requestScoped)
				}
			}
			if got != tc.want {
				t.Fatalf("decided %s, want %s", got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	echo := tool(t, bus.ToolDef{Name: "echo", InputSchema: json.RawMessage(
		`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`)})
	for _, tc := range []struct {
		name   string
		target groups.Resolved
		input  string
		code   string
		want   string // the input the tool gets, when it runs
	}{
		{"valid", groups.Resolved{Tool: echo}, `{"text":"hi"}`, "", `{"text":"hi"}`},
		{"missing property", groups.Resolved{Tool: echo}, `{}`, bus.CodeInvalidInput, ""},
		{"extra property", groups.Resolved{Tool: echo}, `{"text":"hi","x":1}`, bus.CodeInvalidInput, ""},
		{"not an object", groups.Resolved{Tool: echo}, `[1]`, bus.CodeInvalidInput, ""},
		{"a resolution error stays", groups.Resolved{Code: bus.CodeUnknownTool, Message: "ToolNotFoundError: no"}, `{}`, bus.CodeUnknownTool, ""},
		{"reset_tools has no schema here", groups.Resolved{Reset: true}, `{"anything":1}`, "", `{"anything":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			input, early := validate(bus.Call{ID: "c1", Name: "echo", Input: json.RawMessage(tc.input)}, tc.target)
			if tc.code == "" {
				if early != nil {
					t.Fatalf("refused: %+v", early)
				}
				if string(input) != tc.want {
					t.Fatalf("input %s, want %s", input, tc.want)
				}
				return
			}
			if early == nil || early.Error == nil || early.Error.Code != tc.code || input != nil {
				t.Fatalf("result %+v, input %s; want %s", early, input, tc.code)
			}
			if early.State != bus.StateError || len(early.Output) == 0 {
				t.Fatalf("an early result without its text: %+v", early)
			}
		})
	}
}

func execMsg(t *testing.T, typ string, data string) *nats.Msg {
	t.Helper()
	e, err := bus.NewEvent(typ, "worker", json.RawMessage(data))
	if err != nil {
		t.Fatal(err)
	}
	e.SessionID = "s1"
	m, err := e.Msg("reply")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestExecReply(t *testing.T) {
	call := bus.Call{ID: "c1", Name: "echo"}
	for _, tc := range []struct {
		name  string
		typ   string
		data  string
		state string
		code  string
		text  string // the first text block
		patch string
	}{
		{"success", bus.TypeExecResult, `{"state":"success","output":[{"type":"text","text":"hi"}]}`, bus.StateSuccess, "", "hi", ""},
		{"success without output", bus.TypeExecResult, `{"state":"success"}`, bus.StateSuccess, "", "", ""},
		{"tool error keeps its text", bus.TypeExecResult, `{"state":"error","output":[{"type":"text","text":"disk full"}]}`, bus.StateError, bus.CodeToolError, "disk full", ""},
		{"tool error without text gets one", bus.TypeExecResult, `{"state":"error","output":[]}`, bus.StateError, bus.CodeToolError, toolFailedText, ""},
		{"interrupted is the one text", bus.TypeExecResult, `{"state":"interrupted","output":[]}`, bus.StateInterrupted, bus.CodeInterrupted, bus.InterruptedText, ""},
		{"unknown state", bus.TypeExecResult, `{"state":"maybe","output":[]}`, bus.StateError, bus.CodeInternal, "", ""},
		{"bad block", bus.TypeExecResult, `{"state":"success","output":[{"type":"video"}]}`, bus.StateError, bus.CodeToolError, "", ""},
		{"worker refused", bus.TypeError, `{"code":"bad_request","message":"no"}`, bus.StateError, bus.CodeInternal, "", ""},
		{"worker busy", bus.TypeError, `{"code":"busy","message":"at capacity"}`, bus.StateError, bus.CodeUnavailable,
			"ToolUnavailableError: the worker that took the call of 'echo' could not run it: at capacity", ""},
		{"worker's definition rejected", bus.TypeError, `{"code":"unavailable","message":"rejected"}`, bus.StateError, bus.CodeUnavailable, "", ""},
		{"wrong type", bus.TypeCallReply, `{}`, bus.StateError, bus.CodeInternal, "", ""},
		{"state patch", bus.TypeExecResult, `{"state":"success","output":[],"state_patch":{"n":1}}`, bus.StateSuccess, "", "", `{"n":1}`},
		{"null state patch is none", bus.TypeExecResult, `{"state":"success","output":[],"state_patch":null}`, bus.StateSuccess, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, patch, _ := execReply(call, callRef{"s1", "r1", "c1"}, execMsg(t, tc.typ, tc.data))
			if res.State != tc.state || res.ID != "c1" || res.Name != "echo" {
				t.Fatalf("result %+v, want state %s", res, tc.state)
			}
			if code := ""; res.Error != nil {
				code = res.Error.Code
				if code != tc.code {
					t.Fatalf("code %s, want %s", code, tc.code)
				}
			} else if tc.code != "" {
				t.Fatalf("no error, want %s", tc.code)
			}
			if tc.text != "" && (len(res.Output) == 0 || res.Output[0].Text != tc.text) {
				t.Fatalf("output %+v, want text %q first", res.Output, tc.text)
			}
			if res.Output == nil {
				t.Fatal("nil output: results always carry a list")
			}
			if string(patch) != tc.patch {
				t.Fatalf("patch %s, want %s", patch, tc.patch)
			}
		})
	}
}

func TestCallDeadline(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		ms      int64
		batch   time.Time
		timeout time.Duration
	}{
		{"the tool's timeout", 2000, time.Time{}, 2 * time.Second},
		{"a later batch deadline", 2000, now.Add(time.Minute), 2 * time.Second},
		{"an earlier batch deadline", 2000, now.Add(500 * time.Millisecond), 500 * time.Millisecond},
		{"a batch deadline passed", 2000, now.Add(-time.Second), -time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deadline, timeout := callDeadline(now, tc.ms, tc.batch)
			if timeout != tc.timeout || !deadline.Equal(now.Add(tc.timeout)) {
				t.Fatalf("deadline %v timeout %v, want %v", deadline, timeout, tc.timeout)
			}
		})
	}
}

// A reply whose data is not JSON gets the result a full decode gives it
// ("worker reply: ..."), in binary and in structured mode alike, though the
// usual exec result is read without checking its data first.
func TestExecReplyDataNotJSON(t *testing.T) {
	call := bus.Call{ID: "c1", Name: "echo"}
	e, err := bus.NewEvent(bus.TypeExecResult, "worker", json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var binary *nats.Msg
	bus.WithBinaryMsg("reply", e, false, func(m *nats.Msg) {
		binary = &nats.Msg{Subject: m.Subject, Header: cloneHeader(m.Header), Data: []byte(`{"state":"success","output":[]} x`)}
	})
	structured := execMsg(t, bus.TypeExecResult, `{"state":"success","output":[]}`)
	structured.Data = bytes.Replace(structured.Data, []byte(`"output":[]}`), []byte(`"output":[]} x`), 1)
	for name, m := range map[string]*nats.Msg{"binary": binary, "structured": structured} {
		var full bus.Event
		derr := bus.DecodeTo(m, &full)
		if derr == nil {
			t.Fatalf("%s: the message decodes", name)
		}
		res, patch, _ := execReply(call, callRef{"s1", "r1", "c1"}, m)
		want := internal(call, fmt.Errorf("worker reply: %w", derr))
		if !reflect.DeepEqual(res, want) || patch != nil {
			t.Fatalf("%s: %+v, want %+v", name, res, want)
		}
	}
}

// A batch message reads as a full decode and checkTurn read it: the same
// turn, or the same error, though its data is checked only as checkTurn
// reads it; in binary and structured mode, with data that is not JSON
// alone or beside a bad reply id.
func TestDecodeTurnAsBefore(t *testing.T) {
	w := &wire{subj: bus.NewSubjects("")}
	subject := w.subj.Call("s1")
	good := `{"calls":[{"id":"c1","name":"echo","input":{"n":1}}]}`
	binary := func(id, body string) *nats.Msg {
		var out *nats.Msg
		bus.WithBinaryMsg(subject, batchEvent(t, id, good), false, func(m *nats.Msg) {
			out = &nats.Msg{Subject: m.Subject, Header: cloneHeader(m.Header), Data: []byte(body)}
		})
		return out
	}
	structured := func(id, data string) *nats.Msg {
		m, err := batchEvent(t, id, good).Msg(subject)
		if err != nil {
			t.Fatal(err)
		}
		m.Data = bytes.Replace(m.Data, []byte(good), []byte(data), 1)
		return m
	}
	for name, m := range map[string]*nats.Msg{
		"binary":                        binary("r1", good),
		"binary, not JSON":              binary("r1", good+" x"),
		"binary, not JSON, bad id":      binary("r 1", `{"calls":[{"id":"c1","name":"echo","input":{]}`),
		"structured":                    structured("r1", good),
		"structured, not JSON":          structured("r1", `{"calls":[{"id":"c1","name":"echo","input":{]}`),
		"structured, not JSON, bad id":  structured("r 1", `{"calls":[{"id":"c1","name":"echo","input":{]}`),
		"structured, bad input, bad id": structured("r 1", `{"calls":[{"id":"c1","name":"echo","input":[]}]}`),
	} {
		var ev bus.Event
		var into [1]bus.Call // as onBatch decodes a batch of one call: into its batch
		decoded, turn, err := w.decodeTurn(m, kindCall, testLimits, &ev, into[:0])
		var e *bus.Event
		if decoded {
			e = &ev
		}
		we, werr := w.decode(m, "call", bus.TypeCallBatch)
		var wturn any
		if werr == nil {
			wturn, werr = checkTurn(we, testLimits, nil, nil)
		}
		if fmt.Sprint(err) != fmt.Sprint(werr) || (werr == nil) != (name == "binary" || name == "structured") {
			t.Errorf("%s: error %v, want %v", name, err, werr)
		}
		if werr == nil && (!reflect.DeepEqual(turn, wturn) || !reflect.DeepEqual(e, we)) {
			t.Errorf("%s: %+v, want %+v", name, turn, wturn)
		}
	}
}

// cloneHeader copies h and its values: a binary message's header is
// pooled, its values too.
func cloneHeader(h nats.Header) nats.Header {
	out := nats.Header{}
	for k, vs := range h {
		out[k] = append([]string(nil), vs...)
	}
	return out
}
