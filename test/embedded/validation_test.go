package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// wantInvalidInputText checks the fixed text of an invalid_input result:
// "Input validation failed for tool '<name>':" then one "<path>: <message>"
// line per problem, the same problems as error.details.
func wantInvalidInputText(t *testing.T, r bus.Result, tool string) {
	t.Helper()
	text := textOf(r)
	head := "Input validation failed for tool '" + tool + "':"
	lines := strings.Split(text, "\n")
	if lines[0] != head {
		t.Fatalf("first line %q, want %q (text %q)", lines[0], head, text)
	}
	if len(lines) < 2 {
		t.Fatalf("no problem line in %q", text)
	}
	if len(r.Error.Details) != len(lines)-1 {
		t.Fatalf("%d problem lines but %d details: %s", len(lines)-1, len(r.Error.Details), jsonOf(r))
	}
	for i, line := range lines[1:] {
		d := r.Error.Details[i]
		if !strings.HasPrefix(d.Path, "/") || d.Message == "" {
			t.Errorf("detail %d is %+v, want a JSON pointer path and a message", i, d)
		}
		if want := d.Path + ": " + d.Message; line != want {
			t.Errorf("problem line %d is %q, want %q (from error.details)", i, line, want)
		}
	}
	if r.Error.Message != text {
		t.Errorf("error.message %q differs from the output text %q", r.Error.Message, text)
	}
}

// TestUnknownTool: a call to a tool nobody registered is an unknown_tool
// error result with the fixed text; its siblings still run.
func TestUnknownTool(t *testing.T) {
	e := newEnv(t, 1)
	var rec recorder
	addWeather(e, &rec)
	for _, name := range []string{"nope", "Get_Weather", "get_weather_v2", "x"} {
		t.Run(name, func(t *testing.T) {
			reply := e.call(t, "unknown-"+name, []bus.Call{
				{ID: "c1", Name: name, Input: json.RawMessage(`{"city":"Oslo"}`)},
				{ID: "c2", Name: "get_weather", Input: json.RawMessage(`{"city":"Oslo"}`)},
			})
			wantFailure(t, reply.Results[0], bus.StateError, bus.CodeUnknownTool,
				fmt.Sprintf("ToolNotFoundError: The tool named '%s' doesn't exist.", name))
			wantSuccess(t, reply.Results[1], "weather in Oslo")
		})
	}
}

// TestSchemaViolation: input that breaks the tool's schema is an
// invalid_input result with one line and one detail per problem, and the
// worker never runs.
func TestSchemaViolation(t *testing.T) {
	e := newEnv(t, 1)
	var runs atomic.Int64
	schema := json.RawMessage(`{"type":"object","properties":{
		"from":{"type":"string","minLength":3},
		"seats":{"type":"integer","minimum":1},
		"class":{"enum":["economy","business"]}},
		"required":["from","seats"],"additionalProperties":false}`)
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "book_flight", InputSchema: schema},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) {
				runs.Add(1)
				return textResult("booked"), nil
			})
	})
	e.waitLive("book_flight")

	tests := []struct {
		name      string
		input     string
		wantPaths []string // of the details, in order
		mention   []string // words the messages must mention
	}{
		{"wrong type", `{"from":"OSL","seats":"two"}`, []string{"/seats"}, []string{"integer"}},
		{"missing required property", `{"from":"OSL"}`, []string{"/"}, []string{"seats"}},
		{"additional property", `{"from":"OSL","seats":1,"pet":"dog"}`, []string{"/"}, []string{"pet"}},
		{"enum", `{"from":"OSL","seats":1,"class":"first"}`, []string{"/class"}, []string{"economy"}},
		{"two problems", `{"from":"O","seats":0}`, []string{"/from", "/seats"}, nil},
		{"string holding an object", `"{\"from\":\"OSL\",\"seats\":\"x\"}"`, []string{"/seats"}, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reply := e.call(t, fmt.Sprintf("schema-%d", i), []bus.Call{
				{ID: "c1", Name: "book_flight", Input: json.RawMessage(tt.input)}})
			r := reply.Results[0]
			wantFailure(t, r, bus.StateError, bus.CodeInvalidInput, "")
			wantInvalidInputText(t, r, "book_flight")
			var paths []string
			for _, d := range r.Error.Details {
				paths = append(paths, d.Path)
			}
			if !slices.Equal(paths, tt.wantPaths) {
				t.Errorf("detail paths %q, want %q", paths, tt.wantPaths)
			}
			for _, word := range tt.mention {
				if !strings.Contains(textOf(r), word) {
					t.Errorf("text %q does not mention %q", textOf(r), word)
				}
			}
		})
	}
	// A valid call afterwards runs: the tool was live all along.
	wantSuccess(t, e.call(t, "schema-ok", []bus.Call{{ID: "c1", Name: "book_flight",
		Input: json.RawMessage(`{"from":"OSL","seats":2}`)}}).Results[0], "booked")
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want only for the valid call", n)
	}
}
