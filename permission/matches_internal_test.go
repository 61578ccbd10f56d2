package permission

import (
	"encoding/json"

	"github.com/toolbus/toolbus/bus"
)

// Matches reports whether rule applies to a call of def with input. An allow
// rule's pattern must cover the whole call: every part of a compound command
// and both the written and the symlink-resolved path. Relative paths and
// patterns are taken against the process working directory; Decide, which
// knows the session's working directories, should be preferred.
func Matches(rule bus.Rule, def *bus.ToolDef, input json.RawMessage) bool {
	if def == nil || !toolMatches(rule, def) {
		return false
	}
	if rule.Pattern == "" {
		return true
	}
	return newCall(Context{}, def, input).matches(rule)
}
