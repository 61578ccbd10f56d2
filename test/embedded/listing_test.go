package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

func keysOf(m map[string]json.RawMessage) []string {
	return slices.Sorted(maps.Keys(m))
}

// TestListingFormats: every listing format of docs/protocol.md 4.1 has exactly
// its keys, with the registered name, description and schema.
func TestListingFormats(t *testing.T) {
	e := newEnv(t, 1)
	schema := `{"type":"object","properties":{"q":{"type":"string","description":"What to look up (a < b & c)."}},"required":["q"]}`
	const desc = "Look something up."
	e.addWorker(func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "lookup", Description: desc, InputSchema: json.RawMessage(schema),
			ReadOnly: true, Idempotent: true, ConcurrencySafe: true, TimeoutMS: 1234, Permission: bus.PermissionPassthrough},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("found"), nil })
		handle(t, w, bus.ToolDef{Name: "mutate", Description: "Change something."},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) { return textResult("changed"), nil })
	})
	e.waitLive("lookup", "mutate")

	// str, schemaOf and flag read a field of a listed tool.
	str := func(t *testing.T, m map[string]json.RawMessage, k string) string {
		t.Helper()
		var s string
		if err := json.Unmarshal(m[k], &s); err != nil {
			t.Fatalf("%s: %s is not a string: %s", k, m[k], err)
		}
		return s
	}
	flag := func(t *testing.T, m map[string]json.RawMessage, k string) bool {
		t.Helper()
		var b bool
		if err := json.Unmarshal(m[k], &b); err != nil {
			t.Fatalf("%s: %s is not a boolean", k, m[k])
		}
		return b
	}
	sameJSON := func(t *testing.T, what string, got json.RawMessage, want string) {
		t.Helper()
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		_ = json.Unmarshal([]byte(want), &w)
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("%s differs (-registered +listed):\n%s", what, diff)
		}
	}
	// Keys of a section 7 definition; the optional ones may be omitted.
	defKeys := []string{"name", "description", "input_schema", "output_schema", "groups", "read_only", "concurrency_safe",
		"idempotent", "external", "state_injected", "timeout_ms", "max_attempts", "permission", "rule_matcher", "rule_field", "mcp"}
	defRequired := []string{"name", "description", "input_schema", "read_only", "concurrency_safe", "idempotent",
		"external", "state_injected", "timeout_ms", "max_attempts", "permission", "rule_matcher"}

	tests := []struct {
		format string
		check  func(t *testing.T, m map[string]json.RawMessage)
	}{
		{bus.FormatToolbus, func(t *testing.T, m map[string]json.RawMessage) {
			for k := range m {
				if !slices.Contains(defKeys, k) {
					t.Errorf("key %q is not part of a section 7 definition", k)
				}
			}
			for _, k := range defRequired {
				if _, ok := m[k]; !ok {
					t.Errorf("key %q missing", k)
				}
			}
			var d bus.ToolDef
			if err := json.Unmarshal(mustJSON(t, m), &d); err != nil {
				t.Fatal(err)
			}
			if d.Name != "lookup" || d.Description != desc || !d.ReadOnly || !d.Idempotent || !d.ConcurrencySafe ||
				d.External || d.StateInjected || d.TimeoutMS != 1234 || d.MaxAttempts != 1 ||
				d.Permission != bus.PermissionPassthrough || d.RuleMatcher != bus.MatcherNone {
				t.Errorf("definition %+v does not match the registered one", d)
			}
			sameJSON(t, "input_schema", m["input_schema"], schema)
		}},
		{bus.FormatOpenAI, func(t *testing.T, m map[string]json.RawMessage) {
			if got := keysOf(m); !slices.Equal(got, []string{"function", "type"}) {
				t.Fatalf("keys %q, want type, function", got)
			}
			if str(t, m, "type") != "function" {
				t.Errorf("type %s", m["type"])
			}
			var f map[string]json.RawMessage
			if err := json.Unmarshal(m["function"], &f); err != nil {
				t.Fatal(err)
			}
			if got := keysOf(f); !slices.Equal(got, []string{"description", "name", "parameters"}) {
				t.Fatalf("function keys %q, want name, description, parameters", got)
			}
			if str(t, f, "name") != "lookup" || str(t, f, "description") != desc {
				t.Errorf("function %s", jsonOf(f))
			}
			sameJSON(t, "parameters", f["parameters"], schema)
		}},
		{bus.FormatOpenAIResponses, func(t *testing.T, m map[string]json.RawMessage) {
			if got := keysOf(m); !slices.Equal(got, []string{"description", "name", "parameters", "strict", "type"}) {
				t.Fatalf("keys %q, want type, name, description, parameters, strict", got)
			}
			if str(t, m, "type") != "function" || str(t, m, "name") != "lookup" || str(t, m, "description") != desc {
				t.Errorf("tool %s", jsonOf(m))
			}
			if flag(t, m, "strict") {
				t.Errorf("strict is true, want false")
			}
			sameJSON(t, "parameters", m["parameters"], schema)
		}},
		{bus.FormatAnthropic, func(t *testing.T, m map[string]json.RawMessage) {
			if got := keysOf(m); !slices.Equal(got, []string{"description", "input_schema", "name"}) {
				t.Fatalf("keys %q, want name, description, input_schema", got)
			}
			if str(t, m, "name") != "lookup" || str(t, m, "description") != desc {
				t.Errorf("tool %s", jsonOf(m))
			}
			sameJSON(t, "input_schema", m["input_schema"], schema)
		}},
		{bus.FormatGemini, func(t *testing.T, m map[string]json.RawMessage) {
			// parametersJsonSchema, not parameters (protocol 4.1, 1.4).
			if got := keysOf(m); !slices.Equal(got, []string{"description", "name", "parametersJsonSchema"}) {
				t.Fatalf("keys %q, want name, description, parametersJsonSchema", got)
			}
			if str(t, m, "name") != "lookup" || str(t, m, "description") != desc {
				t.Errorf("tool %s", jsonOf(m))
			}
			sameJSON(t, "parametersJsonSchema", m["parametersJsonSchema"], schema)
		}},
		{bus.FormatMCP, func(t *testing.T, m map[string]json.RawMessage) {
			if got := keysOf(m); !slices.Equal(got, []string{"annotations", "description", "inputSchema", "name"}) {
				t.Fatalf("keys %q, want name, description, inputSchema, annotations", got)
			}
			if str(t, m, "name") != "lookup" || str(t, m, "description") != desc {
				t.Errorf("tool %s", jsonOf(m))
			}
			sameJSON(t, "inputSchema", m["inputSchema"], schema)
			var a map[string]json.RawMessage
			if err := json.Unmarshal(m["annotations"], &a); err != nil {
				t.Fatal(err)
			}
			if got := keysOf(a); !slices.Equal(got, []string{"destructiveHint", "idempotentHint", "readOnlyHint"}) {
				t.Fatalf("annotation keys %q, want readOnlyHint, destructiveHint, idempotentHint", got)
			}
			if !flag(t, a, "readOnlyHint") || flag(t, a, "destructiveHint") || !flag(t, a, "idempotentHint") {
				t.Errorf("annotations %s, want read-only, not destructive, idempotent", jsonOf(a))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			list, err := e.client.Tools(testCtx(t), "listing", tt.format, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			var lookup map[string]json.RawMessage
			for _, raw := range list.Tools {
				var m map[string]json.RawMessage
				if err := json.Unmarshal(raw, &m); err != nil {
					t.Fatalf("listed tool %s: %v", raw, err)
				}
				var name string
				if tt.format == bus.FormatOpenAI {
					var f map[string]json.RawMessage
					_ = json.Unmarshal(m["function"], &f)
					name = str(t, f, "name")
				} else {
					name = str(t, m, "name")
				}
				names = append(names, name)
				if name == "lookup" {
					lookup = m
				}
			}
			if !slices.Equal(names, []string{"lookup", "mutate"}) {
				t.Fatalf("listed %q, want lookup, mutate in registration order", names)
			}
			tt.check(t, lookup)
			if !slices.ContainsFunc(list.Groups, func(g bus.GroupInfo) bool {
				return g.Name == bus.GroupBasic && g.Active
			}) {
				t.Errorf("groups %s lack the active group basic", jsonOf(list.Groups))
			}
		})
	}
	t.Run("mcp destructive hint", func(t *testing.T) {
		list, err := e.client.Tools(testCtx(t), "listing", bus.FormatMCP, nil)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Name        string
			Annotations map[string]bool
		}
		_ = json.Unmarshal(list.Tools[1], &m)
		if m.Name != "mutate" || m.Annotations["readOnlyHint"] || !m.Annotations["destructiveHint"] || m.Annotations["idempotentHint"] {
			t.Errorf("mutate listed as %s, want destructive, not read-only, not idempotent", list.Tools[1])
		}
	})
	t.Run("unknown format", func(t *testing.T) {
		_, err := e.client.Tools(testCtx(t), "listing", "langchain", nil)
		if !errors.Is(err, bus.ErrBadRequest) {
			t.Fatalf("err = %v, want bad_request", err)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
