package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

func TestBlockText(t *testing.T) {
	for _, tc := range []struct {
		b    bus.Block
		want string
	}{
		{bus.Block{Type: bus.BlockText, Text: "hi\nthere"}, "hi\nthere"},
		{bus.Block{Type: bus.BlockData, MediaType: "image/png", Data: "AAECAw=="}, "[data image/png, 4 bytes]"},
		{bus.Block{Type: bus.BlockData, MediaType: "application/pdf", URL: "https://example.com/a.pdf"}, "[data application/pdf, https://example.com/a.pdf]"},
		{bus.Block{Type: "audio"}, "[audio block]"},
	} {
		if got := blockText(tc.b); got != tc.want {
			t.Errorf("blockText(%+v) = %q, want %q", tc.b, got, tc.want)
		}
	}
}

func TestRenderReply(t *testing.T) {
	var out bytes.Buffer
	renderReply(&out, &bus.Reply{
		Results: []bus.Result{
			{ID: "c1", Name: "shot", State: bus.StateSuccess, Output: []bus.Block{
				{Type: bus.BlockText, Text: "a picture"}, {Type: bus.BlockData, MediaType: "image/png", Data: "AAE="}}},
			bus.ErrorResult(bus.Call{ID: "c2", Name: "nope"}, bus.CodeUnknownTool, "ToolNotFoundError: The tool named 'nope' doesn't exist."),
		},
		Parked: []bus.Parked{{ID: "c3", Name: "deploy", Kind: bus.KindConfirm, Subject: "toolbus.answer.deploy"},
			{ID: "c4", Name: "pick", Kind: bus.KindExternal, Subject: "toolbus.answer.pick"}},
	}, "s1", "r1")
	want := `shot: success
a picture
[data image/png, 2 bytes]
nope: error (unknown_tool)
ToolNotFoundError: The tool named 'nope' doesn't exist.
deploy: parked for a confirmation, call c3
  allow: toolbus confirm c3 --session s1 --reply r1 --tool deploy [--remember]
  deny:  toolbus confirm c3 --session s1 --reply r1 --tool deploy --deny
pick: parked for its external result, call c4 (on toolbus.answer.pick)
  answer: toolbus answer c4 --session s1 --reply r1 --tool pick '<output>'
`
	if out.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestReplyError(t *testing.T) {
	var parked *parkedError
	if err := replyError(&bus.Reply{Parked: []bus.Parked{{ID: "c1", Kind: bus.KindExternal}}}); !errors.As(err, &parked) || parked.ExitCode() != exitParked {
		t.Fatalf("parked calls are no failure but exit %d: %v", exitParked, err)
	}
	err := replyError(&bus.Reply{Results: []bus.Result{
		{ID: "c1", Name: "a", State: bus.StateSuccess},
		{ID: "c2", Name: "b", State: bus.StateDenied, Error: &bus.ResultError{Code: bus.CodeDenied}},
	}})
	if err == nil || err.Error() != "call c2 of b ended denied (denied)" {
		t.Fatalf("error: %v", err)
	}
}

func event(t *testing.T, typ string, data any) *bus.Event {
	t.Helper()
	e, err := bus.NewEvent(typ, "test", data)
	if err != nil {
		t.Fatal(err)
	}
	e.Time = "2025-03-01T10:11:12.345Z"
	e.SessionID, e.ReplyID = "s1", "r1"
	return e
}

func TestEventSummary(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		e    *bus.Event
		want string
	}{
		{event(t, bus.TypeCallResult, bus.Result{ID: "c1", Name: "echo", State: bus.StateSuccess, Output: bus.Text("one\ntwo")}), "echo success: one two"},
		{event(t, bus.TypeCallResult, bus.Result{ID: "c1", Name: "echo", State: bus.StateSuccess, Output: bus.Text(long)}), "echo success: " + strings.Repeat("x", summaryWidth-1) + "…"},
		{event(t, bus.TypeCallProgress, bus.Progress{Seq: 3, Output: bus.Text("30%")}), "#3 30%"},
		{event(t, bus.TypeCallParked, bus.ParkedEvent{Calls: []bus.Parked{{ID: "c1", Name: "deploy", Kind: bus.KindConfirm}}}), "parked c1/deploy (confirm)"},
		{event(t, bus.TypeBatchDone, bus.BatchDone{Results: []bus.Result{{ID: "c1", State: bus.StateSuccess}, {ID: "c2", State: bus.StateError}}}), "reply r1 done: c1 success, c2 error"},
		{event(t, "io.example.other", map[string]int{"n": 1}), `{"n":1}`},
	} {
		if got := eventSummary(tc.e); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.e.Type, got, tc.want)
		}
	}
}

func TestEventLine(t *testing.T) {
	e := event(t, bus.TypeCallProgress, bus.Progress{Seq: 1, Output: bus.Text("half")})
	e.ToolCallID = "c7"
	fields := strings.Fields(eventLine(e, false))
	if len(fields) != 6 || !slices.Equal(fields[2:], []string{bus.TypeCallProgress, "c7", "#1", "half"}) {
		t.Fatalf("line fields %q", fields)
	}
	e.ToolCallID = ""
	fields = strings.Fields(eventLine(e, true))
	if len(fields) < 5 || fields[2] != "s1" || fields[4] != "-" {
		t.Fatalf("line fields with session %q", fields)
	}
}

func TestToolEntry(t *testing.T) {
	for format, raw := range map[string]string{
		bus.FormatToolbus:         `{"name":"echo","description":"Echo.","input_schema":{}}`,
		bus.FormatOpenAI:          `{"type":"function","function":{"name":"echo","description":"Echo.","parameters":{}}}`,
		bus.FormatOpenAIResponses: `{"type":"function","name":"echo","description":"Echo.","parameters":{},"strict":false}`,
		bus.FormatAnthropic:       `{"name":"echo","description":"Echo.","input_schema":{}}`,
		bus.FormatGemini:          `{"name":"echo","description":"Echo.","parametersJsonSchema":{}}`,
		bus.FormatMCP:             `{"name":"echo","description":"Echo.","inputSchema":{},"annotations":{}}`,
	} {
		name, desc := toolEntry(json.RawMessage(raw))
		if name != "echo" || desc != "Echo." {
			t.Errorf("%s: %q %q", format, name, desc)
		}
	}
}

func TestRenderTools(t *testing.T) {
	var out bytes.Buffer
	renderTools(&out, &bus.ToolsList{
		Tools: []json.RawMessage{
			json.RawMessage(`{"name":"reset_tools","description":"Switch groups.\nMore text."}`),
			json.RawMessage(`{"name":"bare"}`),
		},
		Groups: []bus.GroupInfo{
			{Name: "basic", Scope: bus.ScopeBasic, Active: true},
			{Name: "ops", Description: "Operations.", Scope: bus.ScopeMeta},
		},
	})
	want := `reset_tools — Switch groups.
bare

groups:
  [x] basic (basic)
  [ ] ops (meta) — Operations.
`
	if out.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestParseInterleaved(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	j := fs.Bool("json", false, "")
	s := fs.String("session", "", "")
	pos, err := parse(fs, []string{"echo", "--json", `{"a":1}`, "--session", "s1", "--", "--not-a-flag"})
	if err != nil {
		t.Fatal(err)
	}
	if !*j || *s != "s1" || !slices.Equal(pos, []string{"echo", `{"a":1}`, "--not-a-flag"}) {
		t.Fatalf("json %v session %q positional %q", *j, *s, pos)
	}
}
