package permission_test

import (
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/permission"
)

// TestAttackRuleFieldPointer: hostile inputs against a rule_field JSON
// pointer (now schemas.Pointer). An allow rule must match only the value
// the pointer names, exactly as RFC 6901 reads it: not a key spelt with a
// literal "/" or "~", not an index written "01", "+0" or "-0", not the last
// of duplicate arrays' other members; a deny rule must still catch the
// value when the input also carries decoys.
func TestAttackRuleFieldPointer(t *testing.T) {
	def := func(field string) *bus.ToolDef {
		return &bus.ToolDef{Name: "Sh", RuleMatcher: bus.MatcherCommand, RuleField: field}
	}
	allowLs := bus.Rule{Tool: "Sh", Pattern: "ls", Behavior: "allow"}
	denyRm := bus.Rule{Tool: "Sh", Pattern: "rm:*", Behavior: "deny"}
	for _, tc := range []struct {
		name, field, input string
		rule               bus.Rule
		want               bool
	}{
		{"slash key is not a path", "/a/b", `{"a/b":"ls","a":{"b":"rm -rf /"}}`, allowLs, false},
		{"escaped slash names the key", "/a~1b", `{"a/b":"ls","a":{"b":"rm -rf /"}}`, allowLs, true},
		{"~01 is ~1, not /", "/~01", `{"~1":"rm x","/":"ls"}`, allowLs, false},
		{"~01 deny", "/~01", `{"~1":"rm x","/":"ls"}`, denyRm, true},
		{"leading zero index", "/args/01", `{"args":["rm x","ls"]}`, allowLs, false},
		{"plus index", "/args/+1", `{"args":["rm x","ls"]}`, allowLs, false},
		{"minus zero", "/args/-0", `{"args":["ls"]}`, allowLs, false},
		{"dash index", "/args/-", `{"args":["ls"]}`, allowLs, false},
		{"empty token is the empty key", "/", `{"":"ls","x":"rm y"}`, allowLs, true},
		{"empty token deny", "/", `{"":"rm y"}`, denyRm, true},
		{"duplicate key: the last", "/c", `{"c":"ls","c":"rm -rf /"}`, allowLs, false},
		{"duplicate key deny", "/c", `{"c":"ls","c":"rm -rf /"}`, denyRm, true},
		{"case variant is another key", "/c", `{"C":"rm x","c":"ls"}`, allowLs, true},
		{"string-encoded object", "/a/0", `"{\"a\":[\"rm x\"]}"`, denyRm, true},
		{"past a string", "/c/0", `{"c":"ls"}`, allowLs, false},
		{"overflow index", "/args/18446744073709551616", `{"args":["ls"]}`, allowLs, false},
	} {
		if got := permission.Matches(tc.rule, def(tc.field), json.RawMessage(tc.input)); got != tc.want {
			t.Errorf("%s: Matches(%s, %s, %s) = %v, want %v", tc.name, tc.rule.Behavior, tc.field, tc.input, got, tc.want)
		}
	}
}
