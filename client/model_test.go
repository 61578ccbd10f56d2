package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/model")

// storedDigest and storedURL name the fixtures' stored text output.
var (
	storedDigest = strings.Repeat("0f", 32)
	storedURL    = "nats-object://toolbus_outputs/s1.t.c.x.0#sha256=" + storedDigest
)

// turnResults are the results of the fixtures' five calls, by position:
// a success, an invalid_input (the malformed arguments), an image with
// text, a stored text output named by its preview and a stored image
// named by nothing (the stored-output line); the fifth call is parked.
func turnResults(t *ModelTurn) ([]bus.Result, []bus.Parked) {
	id := func(i int) string { return t.Calls[i].ID }
	invalid := "Input validation failed for tool 'get_weather':\n/: expected an object (or a string holding one)"
	return []bus.Result{
			{ID: id(0), Name: "get_weather", State: bus.StateSuccess, Output: []bus.Block{{Type: bus.BlockText, Text: "4°C, rain"}}},
			{ID: id(1), Name: "get_weather", State: bus.StateError, Output: []bus.Block{{Type: bus.BlockText, Text: invalid}},
				Error: &bus.ResultError{Code: bus.CodeInvalidInput, Message: invalid}},
			{ID: id(2), Name: "screenshot", State: bus.StateSuccess, Output: []bus.Block{
				{Type: bus.BlockText, Text: "The login page."},
				{Type: bus.BlockData, MediaType: "image/png", Data: "iVBORw0KGgo="}}},
			{ID: id(3), Name: "read_log", State: bus.StateSuccess, Output: []bus.Block{
				{Type: bus.BlockText, Text: "2026-12-01 10:00 start\n[… 20971477 bytes left out …]\n2026-12-01 18:00 stop\n[The whole text, 20971520 bytes (sha256 " + storedDigest +
					"), is too large to show here: above are its first 22 and last 21 bytes. It is stored as " + storedURL + "; read_output reads any part of it.]"},
				{Type: bus.BlockData, MediaType: "text/plain; charset=utf-8", URL: storedURL, Size: 20971520},
				{Type: bus.BlockData, MediaType: "image/png", URL: "nats-object://toolbus_outputs/s1.t.c.x.1#sha256=" + strings.Repeat("ab", 32), Size: 3145728}}},
		}, []bus.Parked{{ID: id(4), Name: "deploy", Input: json.RawMessage(`{"env":"prod"}`), Kind: bus.KindConfirm,
			Subject: "toolbus.answer.deploy", SuggestedRules: []bus.Rule{{Tool: "deploy", Behavior: "allow"}}}}
}

// TestModelTurnGolden pins each API's conversion both ways against golden
// files: the calls read from the API's documented assistant-message shape,
// and the tool-result messages made from the same results.
func TestModelTurnGolden(t *testing.T) {
	for _, format := range []string{bus.FormatOpenAI, bus.FormatOpenAIResponses, bus.FormatAnthropic, bus.FormatGemini} {
		t.Run(format, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", "model", format+".in.json"))
			if err != nil {
				t.Fatal(err)
			}
			turn, err := ParseModelTurn(format, in)
			if err != nil {
				t.Fatal(err)
			}
			if len(turn.Calls) != 5 {
				t.Fatalf("calls = %d, want 5: %+v", len(turn.Calls), turn.Calls)
			}
			golden(t, format+".calls.json", turn.Batch())
			results, parked := turnResults(turn)
			reply, err := turn.Reply(results, parked)
			if err != nil {
				t.Fatal(err)
			}
			if len(reply.Parked) != 1 || reply.Parked[0].ID != turn.Calls[4].ID {
				t.Fatalf("parked = %+v", reply.Parked)
			}
			golden(t, format+".out.json", reply.Messages)
		})
	}
}

func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "model", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./client -run Golden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n got: %s\nwant: %s", name, got, want)
	}
}

// TestModelTurnKeepsMalformedArguments: a malformed arguments string is
// kept as the call's string input, so the router answers invalid_input for
// that call alone (docs/protocol.md 3.1) instead of the call going missing.
func TestModelTurnKeepsMalformedArguments(t *testing.T) {
	msg := `{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"x","arguments":"{\"k\": "}}]}`
	turn, err := ParseModelTurn(bus.FormatOpenAI, []byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := json.Unmarshal(turn.Calls[0].Input, &s); err != nil || s != `{"k": ` {
		t.Fatalf("input = %s (%v), want the arguments as a JSON string", turn.Calls[0].Input, err)
	}
}

func TestParseModelTurnRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, format, msg string
		noCalls           bool
	}{
		{"unknown format", "cohere", `{}`, false},
		{"not json", bus.FormatAnthropic, `{"content": [`, false},
		{"no calls", bus.FormatOpenAI, `{"role":"assistant","content":"hi"}`, true},
		{"text only", bus.FormatAnthropic, `[{"type":"text","text":"hi"}]`, true},
		{"duplicate ids", bus.FormatAnthropic, `[{"type":"tool_use","id":"a","name":"x","input":{}},{"type":"tool_use","id":"a","name":"y","input":{}}]`, false},
		{"no name", bus.FormatOpenAIResponses, `[{"type":"function_call","call_id":"a","arguments":"{}"}]`, false},
		{"no id", bus.FormatOpenAI, `{"tool_calls":[{"type":"function","function":{"name":"x","arguments":"{}"}}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseModelTurn(tc.format, []byte(tc.msg))
			if err == nil {
				t.Fatal("accepted")
			}
			if got := errors.Is(err, ErrNoToolCalls); got != tc.noCalls {
				t.Fatalf("err = %v, ErrNoToolCalls = %v, want %v", err, got, tc.noCalls)
			}
		})
	}
}

// TestModelTurnRoundTrip: the results of every call come back under the
// ids the model gave them, in call order, and a Gemini call without an id
// is answered without one.
func TestModelTurnRoundTrip(t *testing.T) {
	msg := `{"role":"model","parts":[{"functionCall":{"name":"a","args":{}}},{"functionCall":{"id":"x","name":"b","args":{}}}]}`
	turn, err := ParseModelTurn(bus.FormatGemini, []byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	results := []bus.Result{
		{ID: turn.Calls[1].ID, Name: "b", State: bus.StateSuccess, Output: []bus.Block{{Type: bus.BlockText, Text: "B"}}},
		{ID: turn.Calls[0].ID, Name: "a", State: bus.StateSuccess, Output: []bus.Block{{Type: bus.BlockText, Text: "A"}}},
		{ID: "other", Name: "c", State: bus.StateSuccess},
	}
	reply, err := turn.Reply(results, nil)
	if err != nil {
		t.Fatal(err)
	}
	var content struct {
		Parts []struct {
			FunctionResponse struct {
				ID       string            `json:"id"`
				Name     string            `json:"name"`
				Response map[string]string `json:"response"`
			} `json:"functionResponse"`
		} `json:"parts"`
	}
	if len(reply.Messages) != 1 {
		t.Fatalf("messages = %d", len(reply.Messages))
	}
	if err := json.Unmarshal(reply.Messages[0], &content); err != nil {
		t.Fatal(err)
	}
	if len(content.Parts) != 2 {
		t.Fatalf("parts = %+v", content.Parts)
	}
	first, second := content.Parts[0].FunctionResponse, content.Parts[1].FunctionResponse
	if first.Name != "a" || first.ID != "" || first.Response["output"] != "A" || second.ID != "x" || second.Response["output"] != "B" {
		t.Fatalf("responses = %+v %+v", first, second)
	}
}

// TestStoredText: a stored output the result's text does not name reaches
// the model with its size, digest and how to read a part (issue 29).
func TestStoredText(t *testing.T) {
	digest := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	url := "nats-object://toolbus_outputs/s1.t.c.x.0#sha256=" + digest
	got := resultText(bus.Result{ID: "c", State: bus.StateSuccess, Output: []bus.Block{
		{Type: bus.BlockData, MediaType: "application/json", URL: url, Size: 3145728}}})
	for _, want := range []string{url, "3145728 bytes", "sha256 " + digest, "read_output"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
}
