// Package permission decides whether a tool call runs, asks or is refused,
// from a session's permission context (docs/protocol.md 6.4,
// docs/permission.md). Everything is a pure function of its arguments and the
// file system, safe for concurrent use.
package permission

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/toolbus/toolbus/bus"
)

// Modes.
const (
	Default     = "default"      // ask unless a rule or the tool allows it
	AcceptEdits = "accept_edits" // as Default, and allow path tools inside the working directories
	Explore     = "explore"      // deny every tool that is not read-only
	Bypass      = "bypass"       // allow everything but deny rules, ask rules and safety asks
	DontAsk     = "dont_ask"     // as Default, with every ask turned into a deny
)

// ValidMode reports whether m is one of the modes.
func ValidMode(m string) bool { return slices.Contains(modes, m) }

var modes = []string{Default, AcceptEdits, Explore, Bypass, DontAsk}

// Context is a session's permission context.
type Context struct {
	// Mode is one of the modes; "" means Default. Decide denies every call
	// in an unknown mode.
	Mode string
	// Rules are checked deny, ask, then allow ("" is allow), not in order;
	// a pattern that does not parse matches nothing.
	Rules []bus.Rule
	// WorkDirs are the working directories; the first is the base of
	// relative paths (default: the process's).
	WorkDirs []string
}

// Behaviors.
const (
	Allow = "allow"
	Deny  = "deny"
	Ask   = "ask"
)

// Decision is the outcome of Decide.
type Decision struct {
	// Behavior is Allow, Deny or Ask.
	Behavior string
	// Reason says why, e.g. "rule Bash(git:*) allows it".
	Reason string
	// Safety reports that the decision comes from the dangerous-path check,
	// which allow rules, the tool's own check and bypass cannot override.
	Safety bool
	// SuggestedRules are, with Ask, allow rules that would allow this call
	// next time, when any could.
	SuggestedRules []bus.Rule
}

// Decide decides one call of def (nil is denied) with its validated input.
// Order: deny rules, ask rules, read-only tools, explore mode, the safety
// ask, then the mode; dont_ask turns asks into denies. See MaxCommand.
func Decide(pc Context, def *bus.ToolDef, input json.RawMessage) Decision {
	if def == nil {
		return Decision{Behavior: Deny, Reason: "the tool has no definition"}
	}
	mode := cmp.Or(pc.Mode, Default)
	if !ValidMode(mode) {
		return Decision{Behavior: Deny, Reason: fmt.Sprintf("unknown permission mode %q", pc.Mode)}
	}
	var c *call
	if def.RuleMatcher == bus.MatcherCommand || def.RuleMatcher == bus.MatcherPath {
		c = newCall(pc, def, input)
	} else {
		c = &call{def: def} // no rule field to read: on the stack
	}
	d := c.decide(pc, mode)
	if mode == DontAsk && d.Behavior == Ask {
		d = Decision{Behavior: Deny, Reason: "dont_ask mode denies what would ask: " + d.Reason, Safety: d.Safety}
	}
	return d
}

func (c *call) decide(pc Context, mode string) Decision {
	// Deny rules first, then ask rules.
	for _, b := range []struct{ behavior, says string }{{Deny, "denies it"}, {Ask, "asks for confirmation"}} {
		for _, r := range pc.Rules {
			if behavior(r) == b.behavior && (c.matches(r) || c.writeMatches(r)) {
				return Decision{Behavior: b.behavior, Reason: fmt.Sprintf("rule %s %s", ruleString(r), b.says)}
			}
		}
	}
	if c.long || c.deep {
		// Not analysed (MaxCommand, ErrTooDeep): only a person may allow it.
		if mode == Explore && !c.def.ReadOnly {
			return Decision{Behavior: Deny, Reason: "explore mode denies tools that are not read-only"}
		}
		reason := fmt.Sprintf("the command is %d bytes, longer than the %d whose writes and programs are judged, so it needs a confirmation", len(c.value), MaxCommand)
		if c.deep {
			reason = "the command nests too deep for its writes and programs to be judged, so it needs a confirmation"
		}
		return Decision{Behavior: Ask, Safety: true, Reason: reason}
	}
	if r, computed, ok := unjudged(c, pc.Rules); ok {
		return Decision{Behavior: Ask, Reason: fmt.Sprintf("rule %s cannot judge %q: its program is named only when it runs", ruleString(r), computed)}
	}
	if c.def.ReadOnly {
		return Decision{Behavior: Allow, Reason: toolSays(c.def.Name)[0]}
	}
	if mode == Explore {
		return Decision{Behavior: Deny, Reason: "explore mode denies tools that are not read-only"}
	}
	if reason, ok := c.dangerous(); ok {
		return Decision{Behavior: Ask, Reason: reason, Safety: true}
	}
	if mode == Bypass {
		if c.def.Permission == bus.PermissionAllow {
			return Decision{Behavior: Allow, Reason: toolSays(c.def.Name)[1]}
		}
		if reason, ok := c.allowed(pc.Rules); ok {
			return Decision{Behavior: Allow, Reason: reason}
		}
		return Decision{Behavior: Allow, Reason: "bypass mode allows it"}
	}
	// Default, AcceptEdits and DontAsk.
	switch c.def.Permission {
	case bus.PermissionAllow:
		return Decision{Behavior: Allow, Reason: toolSays(c.def.Name)[1]}
	case bus.PermissionAsk:
		return Decision{Behavior: Ask, Reason: fmt.Sprintf("tool %s asks for confirmation", c.def.Name)}
	case bus.PermissionPassthrough, "":
	default:
		return Decision{Behavior: Ask, Reason: fmt.Sprintf("tool %s has an unknown permission check %q", c.def.Name, c.def.Permission)}
	}
	if reason, ok := c.allowed(pc.Rules); ok {
		// A program rule never grants a write write_file would ask for; a
		// rule without a pattern trusts the tool with anything.
		toolWide := slices.ContainsFunc(pc.Rules, func(r bus.Rule) bool {
			return behavior(r) == Allow && r.Pattern == "" && toolMatches(r, c.def)
		})
		if why, ok := c.writesGranted(pc, mode); !ok && !toolWide {
			return Decision{Behavior: Ask, Reason: reason + " as a command, but " + why, SuggestedRules: c.suggestWrites(pc.Rules)}
		}
		return Decision{Behavior: Allow, Reason: reason}
	}
	if mode == AcceptEdits && c.inside(editDirs(pc, c.def)) {
		return Decision{Behavior: Allow, Reason: "accept_edits mode allows edits inside the working directories"}
	}
	return Decision{Behavior: Ask, Reason: fmt.Sprintf("no rule allows this call of %s", c.def.Name),
		SuggestedRules: c.suggest(pc.Rules)}
}

// said holds toolSays' reasons by tool name, copied on write: a call its
// tool allows, the most common, builds no string (an allocation).
var said atomic.Pointer[map[string][2]string]

// maxSaid bounds said; past it a tool's reasons are built every call.
const maxSaid = 1024

// toolSays returns "tool <name> is read-only" and "tool <name> allows it".
func toolSays(name string) [2]string {
	m := said.Load()
	if m != nil {
		if r, ok := (*m)[name]; ok {
			return r
		}
	}
	r := [2]string{"tool " + name + " is read-only", "tool " + name + " allows it"}
	if m == nil || len(*m) < maxSaid {
		next := map[string][2]string{name: r}
		if m != nil {
			maps.Copy(next, *m)
		}
		said.CompareAndSwap(m, &next) // lost to another name: built again next call
	}
	return r
}

// maxPattern bounds a rule pattern.
const maxPattern = 4096

// CheckRule reports why r is not a valid rule: tool "*" or a name, behavior
// allow/deny/ask/"", pattern empty, "<command>:*", or path.Match segments.
func CheckRule(r bus.Rule) error {
	if r.Tool != "*" && !bus.ValidName(r.Tool) {
		return fmt.Errorf("permission: rule tool %q must be \"*\" or a tool name matching ^[A-Za-z0-9_-]{1,64}$", r.Tool)
	}
	switch r.Behavior {
	case "", Allow, Deny, Ask:
	default:
		return fmt.Errorf("permission: rule %s: behavior %q must be allow, deny or ask", ruleString(r), r.Behavior)
	}
	if err := checkPattern(r.Pattern); err != nil {
		return fmt.Errorf("permission: rule %s: %w", ruleString(r), err)
	}
	return nil
}

func checkPattern(p string) error {
	if p == "" {
		return nil
	}
	if len(p) > maxPattern {
		return fmt.Errorf("pattern is longer than %d bytes", maxPattern)
	}
	if !utf8.ValidString(p) {
		return errors.New("pattern is not valid UTF-8")
	}
	if strings.TrimSpace(p) == "" {
		return errors.New("pattern is blank")
	}
	if strings.IndexFunc(p, unicode.IsControl) >= 0 {
		return errors.New("pattern contains a control character")
	}
	if prefix, ok := strings.CutSuffix(p, ":*"); ok {
		switch {
		case strings.TrimSpace(prefix) == "":
			return errors.New(`prefix rule needs a command before ":*"`)
		case strings.Contains(prefix, "*"):
			return fmt.Errorf(`prefix rule command %q cannot contain "*"`, prefix)
		}
		return nil
	}
	for _, seg := range strings.Split(p, "/") {
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("pattern segment %q is not a valid glob", seg)
		}
	}
	return nil
}

// unjudged returns a patterned deny or ask rule of c's tool, and the text,
// when the command runs a program no pattern can judge: the call asks
// (TestAttackDenyRuleBypass).
func unjudged(c *call, rules []bus.Rule) (bus.Rule, string, bool) {
	if c.def.RuleMatcher != bus.MatcherCommand || !c.ok {
		return bus.Rule{}, "", false
	}
	if r, ok := programRule(c.def, rules); ok {
		_, computed := c.progs.get(c.value)
		return r, computed, computed != ""
	}
	return bus.Rule{}, "", false
}

// programRule returns def's first deny or ask rule with a pattern.
func programRule(def *bus.ToolDef, rules []bus.Rule) (bus.Rule, bool) {
	for _, r := range rules {
		if b := behavior(r); (b == Deny || b == Ask) && r.Pattern != "" && toolMatches(r, def) {
			return r, true
		}
	}
	return bus.Rule{}, false
}

// behavior returns a rule's behavior, "" meaning allow.
func behavior(r bus.Rule) string { return cmp.Or(r.Behavior, Allow) }

func toolMatches(r bus.Rule, def *bus.ToolDef) bool {
	return r.Tool == "*" || r.Tool == def.Name
}

// ruleString renders a rule as Tool or Tool(pattern).
func ruleString(r bus.Rule) string {
	if r.Pattern == "" {
		return r.Tool
	}
	return r.Tool + "(" + r.Pattern + ")"
}
