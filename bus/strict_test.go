package bus_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// wantBadRequest fails unless err is a bad_request *bus.Error whose message
// contains every part.
func wantBadRequest(t *testing.T, err error, parts ...string) {
	t.Helper()
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeBadRequest {
		t.Fatalf("err %v, want a bad_request *bus.Error", err)
	}
	for _, p := range parts {
		if !strings.Contains(be.Message, p) {
			t.Errorf("message %q does not contain %q", be.Message, p)
		}
	}
}

func TestDecodeToolDef(t *testing.T) {
	const schema = `"input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}`
	for _, tc := range []struct {
		name, data string
		bad        string // a part of the error; "" when the definition is good
	}{
		{"minimal", `{"name": "t", ` + schema + `}`, ""},
		{"every member", `{"name": "deploy", "description": "d", ` + schema + `, "output_schema": null,
			"groups": ["ops"], "read_only": false, "concurrency_safe": false, "idempotent": false, "external": false,
			"state_injected": false, "timeout_ms": 300000, "max_attempts": 1, "permission": "ask",
			"rule_matcher": "command", "rule_field": "cmd", "mcp": {"server": "fs", "tool": "read.file"}}`, ""},
		{"parameters instead of input_schema", `{"name": "t", "parameters": {"type": "object"}}`, `unknown member "parameters"`},
		{"schema instead of input_schema", `{"name": "t", "schema": {"type": "object"}}`, `unknown member "schema"`},
		{"inputSchema (MCP spelling)", `{"name": "t", "inputSchema": {"type": "object"}}`, `unknown member "inputSchema"`},
		{"misspelt flag", `{"name": "t", ` + schema + `, "readonly": true}`, `unknown member "readonly"`},
		{"misspelt timeout", `{"name": "t", ` + schema + `, "timeout": 5}`, `unknown member "timeout"`},
		{"unknown member of mcp", `{"name": "t", ` + schema + `, "mcp": {"server": "fs", "name": "x"}}`, `unknown member "name"`},
		{"no input_schema", `{"name": "t", "description": "d"}`, "input_schema is missing"},
		{"null input_schema", `{"name": "t", "input_schema": null}`, "input_schema is missing"},
		{"wrong type", `{"name": "t", ` + schema + `, "timeout_ms": "5"}`, `member "timeout_ms" must be a number`},
		{"not an object", `["t"]`, "must be a JSON object"},
		{"title and mcp annotations", `{"name": "t", "title": "T", ` + schema + `, "mcp": {"server": "fs", "tool": "t",
			"annotations": {"title": "T", "readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
			"task_support": "required"}}`, ""},
		{"unknown member of mcp annotations", `{"name": "t", ` + schema + `, "mcp": {"server": "fs", "tool": "t", "annotations": {"destructive": true}}}`, `unknown member "destructive"`},
		{"mcp hint of the wrong type", `{"name": "t", ` + schema + `, "mcp": {"server": "fs", "tool": "t", "annotations": {"openWorldHint": "yes"}}}`, `must be a boolean`},
		{"unknown member of the schema is fine", `{"name": "t", "input_schema": {"type": "object", "x-vendor": 1}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := bus.DecodeToolDef([]byte(tc.data))
			if tc.bad == "" {
				if err != nil {
					t.Fatalf("err %v", err)
				}
				if d.Name == "" || d.TimeoutMS == 0 || d.Permission == "" {
					t.Errorf("defaults not applied: %+v", d)
				}
				return
			}
			wantBadRequest(t, err, tc.bad)
		})
	}
	d, err := bus.DecodeToolDef([]byte(`{"name": "t", ` + schema + `}`))
	if err != nil || !d.ConcurrencySafe || d.MaxAttempts != 1 || d.RuleMatcher != bus.MatcherNone {
		t.Errorf("defaults: %+v %v", d, err)
	}
}

func TestDecodeGroup(t *testing.T) {
	if g, err := bus.DecodeGroup([]byte(`{"name": "ops", "description": "d", "instructions": "i", "scope": "meta",
		"active_by_default": true, "activate_on_skill": "deploy", "skills": ["deploy"]}`)); err != nil || g.Name != "ops" || len(g.Skills) != 1 {
		t.Fatalf("every member: %+v %v", g, err)
	}
	for data, member := range map[string]string{
		`{"name": "ops", "descripton": "d"}`:   "descripton",
		`{"name": "ops", "active": true}`:      "active",
		`{"name": "ops", "tools": ["deploy"]}`: "tools",
	} {
		_, err := bus.DecodeGroup([]byte(data))
		wantBadRequest(t, err, `group: unknown member "`+member+`"`)
	}
}

func TestRequestStrict(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		bad        string
	}{
		{"absent", `{"calls": []}`, ""},
		{"null", `{"calls": [], "request": null}`, ""},
		{"complete", `{"calls": [], "request": {"merge_mode": "external_only", "external_tools": [
			{"name": "pick", "description": "d", "input_schema": {"type": "object"}}]}}`, ""},
		{"tools instead of external_tools", `{"calls": [], "request": {"tools": []}}`, `request: unknown member "tools"`},
		{"mode instead of merge_mode", `{"calls": [], "request": {"mode": "agent_only"}}`, `request: unknown member "mode"`},
		{"parameters in an external tool", `{"calls": [], "request": {"external_tools": [{"name": "ok", "input_schema": {"type": "object"}},
			{"name": "pick", "parameters": {"type": "object"}}]}}`, `request.external_tools[1]: unknown member "parameters"`},
		{"not an object", `{"calls": [], "request": []}`, "request must be a JSON object"},
		{"external_tools not an array", `{"calls": [], "request": {"external_tools": {}}}`, `member "external_tools" must be an array`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &bus.Event{Type: bus.TypeCallBatch, Data: json.RawMessage(tc.data)}
			var b bus.Batch
			err := e.DataAs(&b)
			var q bus.ToolsQuery
			qerr := (&bus.Event{Type: bus.TypeToolsQuery, Data: json.RawMessage(strings.Replace(tc.data, `"calls": [],`, `"format": "openai",`, 1))}).DataAs(&q)
			if tc.bad == "" {
				if err != nil || qerr != nil {
					t.Fatalf("batch: %v; query: %v", err, qerr)
				}
				return
			}
			wantBadRequest(t, err, tc.bad)
			wantBadRequest(t, qerr, tc.bad)
		})
	}
	// The top level of a batch stays lenient.
	var b bus.Batch
	if err := (&bus.Event{Type: bus.TypeCallBatch, Data: json.RawMessage(`{"calls": [{"id": "c", "name": "n", "extra": 1}], "x-trace": 1}`)}).DataAs(&b); err != nil {
		t.Errorf("lenient top level: %v", err)
	}
}

func TestAnswerStrict(t *testing.T) {
	decode := func(data string) (bus.Answer, error) {
		var a bus.Answer
		return a, (&bus.Event{Type: bus.TypeAnswer, Data: json.RawMessage(data)}).DataAs(&a)
	}
	for _, tc := range []struct {
		name, data, kind string
		bad              string
	}{
		{"external", `{"state": "success", "output": [{"type": "text", "text": "done"}]}`, bus.KindExternal, ""},
		{"confirmation", `{"confirmed": true, "input": {"a": 1}, "rules": [{"tool": "t", "pattern": "git:*", "behavior": "allow"}]}`, bus.KindConfirm, ""},
		{"result instead of output", `{"state": "success", "result": "done"}`, bus.KindExternal, `answer: unknown member "result"`},
		{"approved instead of confirmed", `{"approved": true}`, bus.KindConfirm, `answer: unknown member "approved"`},
		{"unknown member of a block", `{"state": "success", "output": [{"type": "text", "txt": "done"}]}`, bus.KindExternal, `unknown member "txt"`},
		{"unknown member of a rule", `{"confirmed": true, "rules": [{"tool": "t", "match": "x"}]}`, bus.KindConfirm, `unknown member "match"`},
		{"confirmed in an external answer", `{"state": "success", "output": [], "confirmed": true}`, bus.KindExternal, `answer: unknown member "confirmed"`},
		{"rules in an external answer", `{"state": "success", "output": [], "rules": []}`, bus.KindExternal, `unknown member "rules"`},
		{"output in a confirmation", `{"confirmed": true, "output": []}`, bus.KindConfirm, `answer: unknown member "output"`},
		{"state in a confirmation", `{"confirmed": false, "state": "error"}`, bus.KindConfirm, `answer: unknown member "state"`},
		{"not an object", `"yes"`, bus.KindConfirm, "an answer must be a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := decode(tc.data)
			if err == nil {
				err = a.CheckKind(tc.kind)
			}
			if tc.bad == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantBadRequest(t, err, tc.bad)
		})
	}
}

func TestRegisterDecode(t *testing.T) {
	const good = `{"name": "good", "input_schema": {"type": "object"}}`
	var reg bus.Register
	err := (&bus.Event{Type: bus.TypeRegister, Data: json.RawMessage(`{"worker": "w1", "x-lang": "js", "tools": [` + good + `,
		{"name": "p", "parameters": {"type": "object"}}, {"name": "s", "schema": {}}, {"name": "n"}, {"input_schema": {}, "nme": "x"}]}`)}).DataAs(&reg)
	if err != nil {
		t.Fatal(err)
	}
	if len(reg.Tools) != 1 || reg.Tools[0].Name != "good" {
		t.Errorf("tools %+v", reg.Tools)
	}
	want := []bus.Rejection{{"p", `unknown member "parameters"`}, {"s", `unknown member "schema"`}, {"n", "input_schema is missing"}, {"tools[4]", `unknown member "nme"`}}
	if len(reg.Refused) != len(want) {
		t.Fatalf("refused %+v", reg.Refused)
	}
	for i, w := range want {
		if reg.Refused[i] != w {
			t.Errorf("refused[%d] = %+v, want %+v", i, reg.Refused[i], w)
		}
	}
	// A group with an unknown member fails the whole registration.
	err = (&bus.Event{Type: bus.TypeRegister, Data: json.RawMessage(`{"worker": "w1", "groups": [{"name": "ops", "scope": "meta", "tools": []}], "tools": [` + good + `]}`)}).DataAs(&reg)
	wantBadRequest(t, err, `groups[0]: group: unknown member "tools"`, "nothing was registered")
	// Encoding leaves Refused out.
	b, _ := json.Marshal(bus.Register{Worker: "w", Refused: []bus.Rejection{{"a", "b"}}})
	if strings.Contains(string(b), "Refused") || strings.Contains(string(b), `"b"`) {
		t.Errorf("encoded %s", b)
	}
}

func TestToolDefEqual(t *testing.T) {
	decode := func(s string) bus.ToolDef {
		t.Helper()
		d, err := bus.DecodeToolDef([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	base := decode(`{"name": "t", "description": "d", "input_schema": {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}, "b": {"type": "number"}}, "required": ["a"]}}`)
	for name, s := range map[string]string{
		"member order": `{"input_schema": {"required": ["a"], "properties": {"b": {"type": "number"}, "a": {"minLength": 1, "type": "string"}}, "type": "object"}, "description": "d", "name": "t"}`,
		"white space":  `{"name":"t","description":"d","input_schema":{"type":"object","properties":{"a":{"type":"string","minLength":1},"b":{"type":"number"}},"required":["a"]}}`,
		"explicit defaults": `{"name": "t", "description": "d", "input_schema": {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}, "b": {"type": "number"}}, "required": ["a"]},
			"output_schema": null, "groups": [], "read_only": false, "concurrency_safe": true, "idempotent": false, "external": false, "state_injected": false,
			"timeout_ms": 300000, "max_attempts": 1, "permission": "passthrough", "rule_matcher": "none", "rule_field": ""}`,
		"number spelling": `{"name": "t", "description": "d", "input_schema": {"type": "object", "properties": {"a": {"type": "string", "minLength": 1.0}, "b": {"type": "number"}}, "required": ["a"]}}`,
	} {
		if o := decode(s); !base.Equal(&o) || !o.Equal(&base) {
			t.Errorf("%s: not equal", name)
		}
	}
	for name, s := range map[string]string{
		"description":  `{"name": "t", "description": "e", "input_schema": {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}, "b": {"type": "number"}}, "required": ["a"]}}`,
		"schema value": `{"name": "t", "description": "d", "input_schema": {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}, "b": {"type": "number"}}, "required": ["a"]}}`,
		"array order":  `{"name": "t", "description": "d", "input_schema": {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}, "b": {"type": "number"}}, "required": ["a", "b"]}}`,
		"a flag":       `{"name": "t", "description": "d", "read_only": true, "input_schema": {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}, "b": {"type": "number"}}, "required": ["a"]}}`,
	} {
		if o := decode(s); base.Equal(&o) {
			t.Errorf("%s: equal", name)
		}
	}
}

// TestBlockMembers: the descriptive members of a block (docs/protocol.md 3.3)
// round-trip, and an answer's block with an unknown or mistyped member, or an
// unknown member of its annotations, is refused.
func TestBlockMembers(t *testing.T) {
	p := 0.5
	in := bus.Block{Type: bus.BlockData, MediaType: "application/pdf", URL: "file:///a.pdf", Size: 3, URI: "file:///a.pdf",
		Name: "a.pdf", Title: "A", Description: "the file", Annotations: &bus.Annotations{Audience: []string{"user"}, Priority: &p, LastModified: "2026-01-02T03:04:05Z"}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"type":"data","media_type":"application/pdf","url":"file:///a.pdf","size":3,"uri":"file:///a.pdf","name":"a.pdf","title":"A","description":"the file","annotations":{"audience":["user"],"priority":0.5,"last_modified":"2026-01-02T03:04:05Z"}}`
	if string(b) != want {
		t.Fatalf("marshal:\n%s\nwant\n%s", b, want)
	}
	var a bus.Answer
	if err := json.Unmarshal([]byte(`{"state": "success", "output": [`+want+`]}`), &a); err != nil {
		t.Fatalf("a block with every member: %v", err)
	}
	if got := a.Output[0]; got.URI != in.URI || got.Name != in.Name || got.Annotations == nil || *got.Annotations.Priority != p || got.Annotations.Audience[0] != "user" {
		t.Errorf("decoded %+v", got)
	}
	for _, tc := range []struct{ block, bad string }{
		{`{"type": "text", "text": "x", "annotations": {"audience": ["user"], "lastModified": "x"}}`, `unknown member "lastModified"`},
		{`{"type": "text", "text": "x", "annotations": {"priority": "high"}}`, `must be a number`},
		{`{"type": "text", "text": "x", "annotations": {"audience": "user"}}`, `must be an array`},
		{`{"type": "text", "text": "x", "annotations": []}`, `must be an object`},
		{`{"type": "data", "media_type": "a/b", "data": "", "uri": 3}`, `must be a string`},
		{`{"type": "text", "text": "x", "mime_type": "text/plain"}`, `unknown member "mime_type"`},
	} {
		var a bus.Answer
		wantBadRequest(t, json.Unmarshal([]byte(`{"state": "success", "output": [`+tc.block+`]}`), &a), tc.bad)
	}
}

func TestAnnotationsCheck(t *testing.T) {
	one, two, neg := 1.0, 2.0, -0.1
	for _, tc := range []struct {
		a   *bus.Annotations
		bad string
	}{
		{nil, ""},
		{&bus.Annotations{Audience: []string{"user", "assistant"}, Priority: &one, LastModified: "2026-01-02T03:04:05.5+01:00"}, ""},
		{&bus.Annotations{Audience: []string{"model"}}, "audience"},
		{&bus.Annotations{Priority: &two}, "priority"},
		{&bus.Annotations{Priority: &neg}, "priority"},
		{&bus.Annotations{LastModified: "yesterday"}, "last_modified"},
	} {
		err := tc.a.Check()
		if (err != nil) != (tc.bad != "") || err != nil && !strings.Contains(err.Error(), tc.bad) {
			t.Errorf("%+v: err %v, want %q", tc.a, err, tc.bad)
		}
	}
}
