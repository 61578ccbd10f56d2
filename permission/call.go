package permission

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/shellcmd"
)

// call is one call prepared for matching: the rule field read once, the
// command split once, the path resolved once.
type call struct {
	def   *bus.ToolDef
	value string // the rule field
	ok    bool   // the rule field is present and a string

	// command matcher
	parts []string // the command split into simple commands, for allow rules
	split bool     // parts can be trusted: no substitution, quotes closed
	loose []string // candidates for deny and ask rules: the whole command, then pieces
	// The command's writes (shellcmd.Writes): each seen target as a call
	// of WriteTool, and the text of those computed at run time.
	writes []*call
	unseen []string

	// path matcher
	paths    []string          // the cleaned absolute path, then its resolved form when it differs
	by       string            // for a command's write: what writes it
	bases    []string          // absolute bases of relative patterns
	resolved map[string]string // resolve cache
}

func newCall(def *bus.ToolDef, input json.RawMessage, workDirs []string) *call {
	c := &call{def: def}
	if def.RuleMatcher != bus.MatcherCommand && def.RuleMatcher != bus.MatcherPath {
		return c
	}
	c.value, c.ok = field(input, def.RuleField)
	if !c.ok {
		return c
	}
	switch def.RuleMatcher {
	case bus.MatcherCommand:
		c.parts, c.split = splitCommand(c.value)
		c.loose = looseParts(c.value)
		c.readWrites(workDirs)
	case bus.MatcherPath:
		c.resolved = map[string]string{}
		c.bases = bases(workDirs)
		if def.PathBase != "" {
			// The tool's own directory first: relative inputs are where
			// it will write, and relative patterns are read from there too.
			c.bases = append([]string{filepath.Clean(def.PathBase)}, slices.DeleteFunc(c.bases, func(b string) bool { return b == def.PathBase })...)
			if len(workDirs) == 0 {
				c.bases = c.bases[:1] // not the router's own directory
			}
		}
		raw := c.value
		if !filepath.IsAbs(raw) {
			// Not filepath.Join: "link/.." must be resolved, not cleaned away.
			raw = c.bases[0] + string(filepath.Separator) + raw
		}
		clean := filepath.Clean(raw)
		c.paths = []string{clean}
		if r := c.resolve(raw); r != clean {
			c.paths = append(c.paths, r)
		}
	}
	return c
}

// real is the path the tool will touch: the input path made absolute
// against the tool's base and resolved through symlinks. Allow rules,
// accept_edits and suggestions judge it (docs/protocol.md 6.4); deny and
// ask rules, and the safety checks, match the written form too.
func (c *call) real() string { return c.paths[len(c.paths)-1] }

// field returns the string at name in input: a top-level key, or a JSON
// pointer when name starts with "/".
func field(input json.RawMessage, name string) (string, bool) {
	if name == "" {
		return "", false
	}
	var v any
	if json.Unmarshal(input, &v) != nil {
		return "", false
	}
	if s, ok := v.(string); ok { // an object encoded as a string (OpenAI arguments)
		if json.Unmarshal([]byte(s), &v) != nil {
			return "", false
		}
	}
	if !strings.HasPrefix(name, "/") {
		m, _ := v.(map[string]any)
		s, ok := m[name].(string)
		return s, ok
	}
	for _, tok := range strings.Split(name[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return "", false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) || tok != strconv.Itoa(i) {
				return "", false
			}
			v = x[i]
		default:
			return "", false
		}
	}
	s, ok := v.(string)
	return s, ok
}

// matches reports whether the pattern rule r (tool already checked or not)
// matches the call.
func (c *call) matches(r bus.Rule) bool {
	if !toolMatches(r, c.def) {
		return false
	}
	if r.Pattern == "" {
		return true
	}
	if !c.ok {
		return false
	}
	whole := behavior(r) == Allow
	switch c.def.RuleMatcher {
	case bus.MatcherCommand:
		if whole {
			if !c.split || len(c.parts) == 0 {
				return false
			}
			for _, p := range c.parts {
				if !matchCommand(r.Pattern, p, true) {
					return false
				}
			}
			return true
		}
		return slices.ContainsFunc(c.loose, func(s string) bool { return matchCommand(r.Pattern, s, false) })
	case bus.MatcherPath:
		forms := c.patternForms(r.Pattern)
		match := func(p string) bool {
			return slices.ContainsFunc(forms, func(f string) bool { return matchPath(f, p) })
		}
		if whole {
			return len(c.paths) > 0 && match(c.real())
		}
		return slices.ContainsFunc(c.paths, match)
	}
	return false
}

// allowed reports whether the allow rules cover the call: a tool-only rule,
// or for each part of the command (each form of the path) some pattern rule.
func (c *call) allowed(rules []bus.Rule) (string, bool) {
	var targets []string
	switch {
	case !c.ok:
	case c.def.RuleMatcher == bus.MatcherCommand && c.split:
		targets = c.parts
	case c.def.RuleMatcher == bus.MatcherPath:
		targets = []string{c.real()}
	}
	by := make([]string, len(targets))
	for _, r := range rules {
		if behavior(r) != Allow || !toolMatches(r, c.def) {
			continue
		}
		if r.Pattern == "" {
			return fmt.Sprintf("rule %s allows it", ruleString(r)), true
		}
		for i, t := range targets {
			if by[i] == "" && c.covers(r.Pattern, t) {
				by[i] = ruleString(r)
			}
		}
	}
	if len(targets) == 0 || slices.Contains(by, "") {
		return "", false
	}
	slices.Sort(by)
	by = slices.Compact(by)
	if len(by) == 1 {
		return fmt.Sprintf("rule %s allows it", by[0]), true
	}
	return fmt.Sprintf("rules %s allow it", strings.Join(by, ", ")), true
}

// covers reports whether an allow pattern matches one part of the command
// or one form of the path.
func (c *call) covers(pattern, target string) bool {
	if c.def.RuleMatcher == bus.MatcherCommand {
		return matchCommand(pattern, target, true)
	}
	return slices.ContainsFunc(c.patternForms(pattern), func(f string) bool { return matchPath(f, target) })
}

// suggest returns allow rules that would allow the call next time.
func (c *call) suggest(rules []bus.Rule) []bus.Rule {
	tool := bus.Rule{Tool: c.def.Name, Behavior: Allow}
	if !c.ok || (c.def.RuleMatcher != bus.MatcherCommand && c.def.RuleMatcher != bus.MatcherPath) {
		return []bus.Rule{tool}
	}
	var targets []string
	if c.def.RuleMatcher == bus.MatcherCommand {
		if !c.split {
			return nil // no pattern can allow it; a tool-wide rule is too broad to suggest
		}
		targets = c.parts
	} else {
		targets = []string{c.real()}
	}
	var out []bus.Rule
	for _, t := range targets {
		if slices.ContainsFunc(rules, func(r bus.Rule) bool {
			return behavior(r) == Allow && toolMatches(r, c.def) && r.Pattern != "" && c.covers(r.Pattern, t)
		}) {
			continue
		}
		var pattern string
		if c.def.RuleMatcher == bus.MatcherCommand {
			pattern = strings.Fields(t)[0] + ":*"
		} else {
			dir := escapeGlob(filepath.ToSlash(filepath.Dir(t)))
			pattern = strings.TrimSuffix(dir, "/") + "/**"
		}
		r := bus.Rule{Tool: c.def.Name, Pattern: pattern, Behavior: Allow}
		if CheckRule(r) == nil && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// bases returns the absolute, cleaned work dirs, or the process working
// directory when there are none.
func bases(workDirs []string) []string {
	var out []string
	for _, d := range workDirs {
		if d == "" {
			continue
		}
		if a, err := filepath.Abs(d); err == nil {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		wd, err := os.Getwd()
		if err != nil {
			wd = string(filepath.Separator)
		}
		out = append(out, wd)
	}
	return out
}

// WriteTool is the tool whose rules and dangerous-path check judge the
// files a command writes (redirections, sed -i, cp ...): each write of a
// rule_matcher "command" call is decided as a call of write_file on its
// target, relative to the command tool's path_base.
const WriteTool = "write_file"

// readWrites finds the command's writes; a command that parses in
// neither grammar has none that can be seen (and no allow pattern covers
// it either, as its parts are not trusted).
func (c *call) readWrites(workDirs []string) {
	ws, err := shellcmd.Writes(c.value)
	if err != nil {
		return
	}
	def := &bus.ToolDef{Name: WriteTool, RuleMatcher: bus.MatcherPath, RuleField: "path", PathBase: c.def.PathBase}
	for _, w := range ws {
		if w.Path == "" {
			c.unseen = append(c.unseen, w.Raw)
			continue
		}
		in, _ := json.Marshal(map[string]string{"path": w.Path})
		wc := newCall(def, in, workDirs)
		wc.by = w.By
		c.writes = append(c.writes, wc)
	}
}

// writeMatches reports whether the deny or ask rule r matches one of the
// command's writes, as a rule of WriteTool (or "*").
func (c *call) writeMatches(r bus.Rule) bool {
	return slices.ContainsFunc(c.writes, func(w *call) bool { return w.matches(r) })
}

// toolWide reports whether an allow rule without a pattern covers the
// call's tool: such a rule trusts the tool with anything.
func toolWide(rules []bus.Rule, def *bus.ToolDef) bool {
	return slices.ContainsFunc(rules, func(r bus.Rule) bool {
		return behavior(r) == Allow && r.Pattern == "" && toolMatches(r, def)
	})
}

// writesGranted reports whether every write of the command is one that
// write_file would be allowed to make without asking: by an allow rule of
// WriteTool, or in accept_edits inside the working directories; a
// computed target never is. It names the first write that is not.
func (c *call) writesGranted(pc Context, mode string) (string, bool) {
	if len(c.unseen) > 0 {
		return fmt.Sprintf("its write to %s is computed when it runs, so no rule can allow it", c.unseen[0]), false
	}
	for _, w := range c.writes {
		if _, ok := w.allowed(pc.Rules); ok {
			continue
		}
		if mode == AcceptEdits && w.inside(editDirs(pc, w.def)) {
			continue
		}
		return fmt.Sprintf("no %s rule allows its write to %s (%s)", WriteTool, w.real(), w.by), false
	}
	return "", true
}

// editDirs are the directories accept_edits allows edits in.
func editDirs(pc Context, def *bus.ToolDef) []string {
	if len(pc.WorkDirs) == 0 && def.PathBase != "" {
		return []string{def.PathBase}
	}
	return pc.WorkDirs
}

// suggestWrites returns WriteTool rules that would allow the command's
// writes that no rule allows yet (none for a computed target).
func (c *call) suggestWrites(rules []bus.Rule) []bus.Rule {
	if len(c.unseen) > 0 {
		return nil
	}
	var out []bus.Rule
	for _, w := range c.writes {
		if _, ok := w.allowed(rules); ok {
			continue
		}
		for _, r := range w.suggest(rules) {
			if r.Pattern != "" && !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}
