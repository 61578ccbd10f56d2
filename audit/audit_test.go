package audit

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	names := []string{"password", "API_KEY"}
	for _, tc := range []struct{ in, want string }{
		{`{"user":"a","password":"p"}`, `{"password":"[redacted]","user":"a"}`},
		{`{"deep":{"list":[{"api_key":"k","n":1}]}}`, `{"deep":{"list":[{"api_key":"[redacted]","n":1}]}}`},
		{`{"Password":{"nested":"x"}}`, `{"Password":"[redacted]"}`},
		{`"{\"password\":\"p\"}"`, `"{\"password\":\"[redacted]\"}"`}, // the string form of an input
		{`{"n":12345678901234567890}`, `{"n":12345678901234567890}`},  // numbers kept exactly
		{`not json`, `"[redacted: not JSON]"`},
		{`[1,"password"]`, `[1,"password"]`}, // values are not names
	} {
		got := string(Redact(json.RawMessage(tc.in), names))
		if got != tc.want {
			t.Errorf("Redact(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := string(Redact(json.RawMessage(`{"password":"p"}`), nil)); got != `{"password":"p"}` {
		t.Errorf("no names: %s", got)
	}
}

func FuzzRedact(f *testing.F) {
	f.Add(`{"password":"hunter2","a":[{"password":"x"}]}`)
	f.Add(`"{\"password\":\"hunter2\"}"`)
	f.Fuzz(func(t *testing.T, in string) {
		out := Redact(json.RawMessage(in), []string{"password"})
		if !json.Valid(out) {
			t.Fatalf("Redact(%q) = %q, not JSON", in, out)
		}
		var m map[string]any
		if json.Unmarshal([]byte(in), &m) == nil {
			if v, ok := m["password"].(string); ok && len(v) > 3 && strings.Contains(string(out), `"password":"`+v+`"`) {
				t.Fatalf("secret kept: %s", out)
			}
		}
	})
}
