package permission

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
	"github.com/toolbus/toolbus/shellcmd"
)

// call is one call prepared for matching: field read, command split, path resolved once.
type call struct {
	def   *bus.ToolDef
	value string // the rule field
	ok    bool   // the rule field is present and a string

	// command matcher
	long   bool            // the command is longer than MaxCommand: not analysed, it asks
	deep   bool            // the command nests too deep to be parsed (shellcmd.ErrTooDeep): it asks
	text   string          // what deny and ask rules read: the command, or its first MaxCommand bytes
	pieces commandPieces   // its parts for allow rules and pieces for deny and ask rules
	progs  commandPrograms // its programs, for deny and ask rules
	// The command's writes (shellcmd.WritesOf): each seen target as a call
	// of WriteTool, and the text of those computed at run time.
	writes []*call
	unseen []string

	// path matcher
	paths    []string // the cleaned absolute path, then its resolved form when it differs
	by       string   // for a command's write: what writes it
	bases    []string // absolute bases of relative patterns
	resolved links    // resolve cache
}

// newCall is the call of a tool whose rule matcher reads a field, analysed.
func newCall(pc Context, def *bus.ToolDef, input json.RawMessage) *call {
	value, ok := field(input, def.RuleField)
	c := newValueCall(def, value, ok, pc.WorkDirs)
	if def.RuleMatcher == bus.MatcherCommand && ok && !c.long {
		_, programs := programRule(def, pc.Rules)
		c.readWrites(pc.WorkDirs, programs)
	}
	return c
}

// MaxCommand bounds the command that is analysed; a longer one asks unless a
// deny or ask rule matches its first MaxCommand bytes (docs/protocol.md 6.4).
// Analysis costs about 1 µs per byte (docs/security.md).
const MaxCommand = 64 << 10

// newValueCall is newCall with the rule field read (ok: present, a string).
func newValueCall(def *bus.ToolDef, value string, ok bool, workDirs []string) *call {
	c := &call{def: def, value: value, ok: ok}
	if !c.ok {
		return c
	}
	switch def.RuleMatcher {
	case bus.MatcherCommand:
		c.text = c.value
		if len(c.value) > MaxCommand {
			c.long = true
			c.text = c.value[:MaxCommand]
		}
	case bus.MatcherPath:
		c.resolved = links{}
		c.bases = bases(workDirs)
		if def.PathBase != "" {
			// The tool's own directory first: relative inputs and patterns are read there.
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
		if r := c.resolved.resolve(raw); r != clean {
			c.paths = append(c.paths, r)
		}
	}
	return c
}

// real is the absolute, symlink-resolved path the tool will touch, which
// allow rules judge; deny, ask and safety checks see the written form too.
func (c *call) real() string { return c.paths[len(c.paths)-1] }

// field returns the string at name in input: a key, or a JSON pointer ("/...").
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
	v, _ = schemas.Pointer(v, name)
	s, ok := v.(string)
	return s, ok
}

// matches reports whether the pattern rule r matches the call.
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
	if behavior(r) == Allow { // the whole call: every part of the command, the real path
		targets := c.targets()
		return len(targets) > 0 && !slices.ContainsFunc(targets, func(t string) bool { return !c.covers(r.Pattern, t) })
	}
	switch c.def.RuleMatcher {
	case bus.MatcherCommand:
		m := compileCommand(r.Pattern)
		match := func(s string) bool { return m.match(s, false) }
		if slices.ContainsFunc(c.pieces.loosePieces(c.text), match) {
			return true
		}
		progs, _ := c.progs.get(c.text)
		return slices.ContainsFunc(progs, match)
	case bus.MatcherPath:
		forms := c.patternForms(r.Pattern)
		return slices.ContainsFunc(c.paths, func(p string) bool {
			return slices.ContainsFunc(forms, func(f string) bool { return matchPath(f, p) })
		})
	}
	return false
}

// allowed reports whether the allow rules cover the call: a tool-only rule,
// or for each part of the command (each form of the path) some pattern rule.
func (c *call) allowed(rules []bus.Rule) (string, bool) {
	var targets, by []string
	read := false
	for _, r := range rules {
		if behavior(r) != Allow || !toolMatches(r, c.def) {
			continue
		}
		if r.Pattern == "" {
			return fmt.Sprintf("rule %s allows it", ruleString(r)), true
		}
		if !read { // only when some pattern rule may allow it
			targets, read = c.targets(), true
			by = make([]string, len(targets))
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

// targets are what allow patterns must cover: each part of a command
// that can be trusted, or the real path; none when the field is missing.
func (c *call) targets() []string {
	switch {
	case !c.ok:
	case c.def.RuleMatcher == bus.MatcherCommand:
		if c.long || c.deep {
			return nil
		}
		if parts, split := c.pieces.splitParts(c.value); split {
			return parts
		}
	case c.def.RuleMatcher == bus.MatcherPath:
		return []string{c.real()}
	}
	return nil
}

// covers reports whether an allow pattern matches one command part or path form.
func (c *call) covers(pattern, target string) bool {
	if c.def.RuleMatcher == bus.MatcherCommand {
		return compileCommand(pattern).match(target, true)
	}
	return slices.ContainsFunc(c.patternForms(pattern), func(f string) bool { return matchPath(f, target) })
}

// maxSuggested bounds an ask's suggested rules; a command needing more gets none.
const maxSuggested = 32

// suggest returns allow rules for next time; none past maxSuggested.
func (c *call) suggest(rules []bus.Rule) []bus.Rule {
	tool := bus.Rule{Tool: c.def.Name, Behavior: Allow}
	if !c.ok || (c.def.RuleMatcher != bus.MatcherCommand && c.def.RuleMatcher != bus.MatcherPath) {
		return []bus.Rule{tool}
	}
	if c.def.RuleMatcher == bus.MatcherCommand {
		if c.long || c.deep {
			return nil
		}
		if parts, split := c.pieces.splitParts(c.value); !split || slices.ContainsFunc(parts, launches) {
			// No pattern can allow it, or the one that would (env:*, bash:*)
			// allows every program; a tool-wide rule is too broad to suggest.
			return nil
		}
		if _, computed := c.progs.get(c.value); computed != "" {
			return nil // "s?:*" names no program: the files there do (TestAttackComputedProgramRuleSuggested)
		}
	}
	var out []bus.Rule
	for _, t := range c.targets() {
		if c.def.RuleMatcher == bus.MatcherCommand && slices.ContainsFunc(out, func(r bus.Rule) bool {
			return strings.TrimSuffix(r.Pattern, ":*") == firstWord(t)
		}) {
			continue // suggested already
		}
		if slices.ContainsFunc(rules, func(r bus.Rule) bool {
			return behavior(r) == Allow && toolMatches(r, c.def) && r.Pattern != "" && c.covers(r.Pattern, t)
		}) {
			continue
		}
		var pattern string
		if c.def.RuleMatcher == bus.MatcherCommand {
			pattern = firstWord(t) + ":*"
		} else {
			if d := filepath.Dir(t); d == filepath.Dir(d) {
				return nil // "/**" would allow every path (session 18, red team)
			}
			dir := escapeGlob(filepath.ToSlash(filepath.Dir(t)))
			pattern = strings.TrimSuffix(dir, "/") + "/**"
		}
		r := bus.Rule{Tool: c.def.Name, Pattern: pattern, Behavior: Allow}
		if CheckRule(r) == nil && !slices.Contains(out, r) {
			if len(out) == maxSuggested {
				return nil
			}
			out = append(out, r)
		}
	}
	return out
}

// firstWord is the first word of a normalized command part.
func firstWord(part string) string {
	word, _, _ := strings.Cut(part, " ")
	return word
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

// bases returns the absolute, cleaned work dirs, or the process's own.
func bases(workDirs []string) []string {
	if out := absDirs(workDirs); len(out) > 0 {
		return out
	}
	wd, err := os.Getwd()
	if err != nil {
		wd = string(filepath.Separator)
	}
	return []string{wd}
}

// absDirs are the non-empty dirs made absolute (those filepath.Abs can).
func absDirs(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if a, err := filepath.Abs(d); d != "" && err == nil {
			out = append(out, a)
		}
	}
	return out
}

// WriteTool's rules judge each file a command writes, as a call on its target.
const WriteTool = "write_file"

// commandPieces holds what the rules match of a command's text, cut on first use.
type commandPieces struct {
	parts     []string // the command split into simple commands, for allow rules
	split     bool     // parts can be trusted: no substitution, quotes closed
	splitDone bool     // parts and split are set
	loose     []string // candidates for deny and ask rules: the whole command, then pieces
}

// splitParts returns cmd split for allow rules (splitCommand).
func (p *commandPieces) splitParts(cmd string) ([]string, bool) {
	if !p.splitDone {
		p.parts, p.split = splitCommand(cmd)
		p.splitDone = true
	}
	return p.parts, p.split
}

// loosePieces is looseParts of text's first MaxCommand bytes.
func (p *commandPieces) loosePieces(text string) []string {
	if p.loose == nil {
		p.loose = looseParts(text)
	}
	return p.loose
}

// readWrites finds the command's writes (each distinct one once), and with
// programs its programs in the same walk. An unparsable command has none,
// and no allow pattern covers it.
func (c *call) readWrites(workDirs []string, programs bool) {
	c.progs.parse(c.value)
	c.deep = c.progs.deep
	if len(c.progs.trees) == 0 {
		return
	}
	var each func(*syntax.CallExpr)
	if programs {
		visit, done := readPrograms(c.value)
		defer func() { c.progs.list, c.progs.computed = done(); c.progs.read = true }()
		each = visit
	}
	ws := shellcmd.WritesOf(c.value, c.progs.trees, each)
	def := &bus.ToolDef{Name: WriteTool, RuleMatcher: bus.MatcherPath, RuleField: "path", PathBase: c.def.PathBase}
	type seen struct{ path, by string }
	done := map[seen]bool{}
	for _, w := range ws {
		if w.Path == "" {
			c.unseen = append(c.unseen, w.Raw)
			continue
		}
		if done[seen{w.Path, w.By}] {
			continue
		}
		done[seen{w.Path, w.By}] = true
		wc := newValueCall(def, w.Path, true, workDirs)
		wc.by = w.By
		c.writes = append(c.writes, wc)
	}
}

// writeMatches reports whether deny or ask rule r matches a write (as WriteTool).
func (c *call) writeMatches(r bus.Rule) bool {
	return slices.ContainsFunc(c.writes, func(w *call) bool { return w.matches(r) })
}

// writesGranted reports whether WriteTool may make every write without
// asking (a computed target never may), naming the first that may not.
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

// editDirs are where accept_edits allows edits: the session's, else the tool's.
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

// commandPattern is a command pattern read once for matching many pieces:
// "git:*" matches "git" and "git ..."; a pattern with "*" is a glob anchored
// at both ends; a plain pattern matches a normalized command exactly, or as
// a substring when exact is false.
type commandPattern struct {
	p      string // normalized; for a prefix rule, the prefix
	prefix bool
	glob   bool
}

func compileCommand(pattern string) commandPattern {
	p := normalize(pattern)
	if prefix, ok := strings.CutSuffix(p, ":*"); ok && !strings.Contains(prefix, "*") {
		return commandPattern{p: strings.TrimSpace(prefix), prefix: true}
	}
	return commandPattern{p: p, glob: strings.Contains(p, "*")}
}

func (m commandPattern) match(s string, exact bool) bool {
	switch {
	case m.p == "":
		return false
	case m.prefix:
		return strings.HasPrefix(s, m.p) && (len(s) == len(m.p) || s[len(m.p)] == ' ')
	case m.glob:
		return glob(m.p, s)
	case exact:
		return s == m.p
	}
	return strings.Contains(s, m.p)
}

// normalize trims s and collapses white space runs (no copy when already so).
func normalize(s string) string {
	if t := strings.TrimSpace(s); normalized(t) {
		return t
	}
	return strings.Join(strings.Fields(s), " ")
}

// normalized reports whether strings.Join(strings.Fields(s), " ") is s.
func normalized(s string) bool {
	space := true // at the start: a space there is not normalized
	for i := 0; i < len(s); {
		r, n := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, n = utf8.DecodeRuneInString(s[i:])
		}
		switch {
		case r == ' ':
			if space {
				return false
			}
			space = true
		case unicode.IsSpace(r):
			return false
		default:
			space = false
		}
		i += n
	}
	return !space || s == ""
}

// glob matches s against p, where '*' matches any run of bytes and every
// other byte itself, in time O(len(p)·len(s)) at worst.
func glob(p, s string) bool {
	px, sx := 0, 0
	nextPx, nextSx := 0, 0
	for px < len(p) || sx < len(s) {
		if px < len(p) {
			switch c := p[px]; {
			case c == '*':
				nextPx, nextSx = px, sx+1
				px++
				continue
			case sx < len(s) && s[sx] == c:
				px++
				sx++
				continue
			}
		}
		if 0 < nextSx && nextSx <= len(s) {
			px, sx = nextPx, nextSx
			continue
		}
		return false
	}
	return true
}

// splitCommand splits a command into normalized simple commands at
// separators outside quotes. ok is false for substitutions, ANSI-C quoting or
// an unterminated quote: its parts cannot be trusted.
func splitCommand(s string) (parts []string, ok bool) {
	// A part is every byte between two separators: cut from s, not copied.
	parts = make([]string, 0, 1+strings.Count(s, ";")+strings.Count(s, "\n")+strings.Count(s, "|")+strings.Count(s, "&"))
	start := 0
	flush := func(end int) {
		if p := normalize(s[start:end]); p != "" {
			parts = append(parts, p)
		}
		start = end + 1
	}
	const (
		plain = iota
		single
		double
	)
	state := plain
	next := func(i int) byte {
		if i+1 < len(s) {
			return s[i+1]
		}
		return 0
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch state {
		case single:
			if ch == '\'' {
				state = plain
			}
			continue
		case double:
			switch {
			case ch == '\\' && i+1 < len(s):
				i++
			case ch == '"':
				state = plain
			case ch == '`', ch == '$' && next(i) == '(':
				return nil, false
			}
			continue
		}
		switch ch {
		case '\\':
			if i+1 < len(s) {
				i++
			}
		case '\'':
			state = single
		case '"':
			state = double
		case '`':
			return nil, false
		case '$', '<', '>':
			if n := next(i); n == '(' || (ch == '$' && n == '\'') {
				return nil, false
			}
		case '&':
			if i > 0 && (s[i-1] == '>' || s[i-1] == '<') || next(i) == '>' {
				continue // 2>&1, <&0, &>file
			}
			flush(i)
		case '|', ';', '\n', '\r':
			flush(i)
		}
	}
	if state != plain {
		return nil, false
	}
	flush(len(s))
	return parts, true
}

// looseParts returns what deny and ask rules match: the command, every piece
// between separators (quoted or not), and those unquoted. It errs towards
// more candidates: a deny rule matching too much is the safe error.
func looseParts(s string) []string {
	out := make([]string, 1, 4+2*strings.Count(s, ";"))
	out[0] = normalize(s)
	add := func(p string) {
		if p = normalize(p); p != "" {
			out = append(out, p)
		}
	}
	both := func(p string) {
		add(p)
		if u := unquoteWord.Replace(p); u != p {
			add(u)
		}
	}
	start := -1
	for i := 0; i <= len(s); i++ {
		if i < len(s) && strings.IndexByte("&|;\n\r`(){}", s[i]) < 0 {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			both(s[start:i])
			start = -1
		}
	}
	if u := unquoteWord.Replace(s); u != s {
		add(u)
	}
	return out
}

// dangerous reports which shellcmd.Protected name the call's path hits.
func (c *call) dangerous() (string, bool) {
	if c.def.RuleMatcher == bus.MatcherCommand && c.ok {
		return c.dangerousWrite()
	}
	if c.def.RuleMatcher != bus.MatcherPath || !c.ok {
		return "", false
	}
	for i, p := range c.paths {
		if name, ok := shellcmd.Protected(p); ok {
			if i > 0 {
				p = c.paths[0] + " resolves to " + p
			}
			return fmt.Sprintf("writes to a dangerous path %s (%s)", name, p), true
		}
	}
	return "", false
}

// dangerousWrite is dangerous for a command's writes, computed ones' text included.
func (c *call) dangerousWrite() (string, bool) {
	for _, w := range c.writes {
		if reason, ok := w.dangerous(); ok {
			return fmt.Sprintf("the command (%s) %s", w.by, reason), true
		}
	}
	for _, raw := range c.unseen {
		for _, f := range strings.Fields(unquoteWord.Replace(raw)) {
			if name, ok := shellcmd.Protected(f); ok {
				return fmt.Sprintf("the command writes to a computed path that names the dangerous %s (%s)", name, raw), true
			}
		}
	}
	return "", false
}

// maxLinks bounds the symlinks followed for one path, as the kernel's ELOOP.
const maxLinks = 40

// links caches resolve's results for one call.
type links map[string]string

func (l links) resolve(p string) string {
	if r, ok := l[p]; ok {
		return r
	}
	r := Resolve(p)
	l[p] = r
	return r
}

// Resolve follows every symlink on absolute p component by component
// (dangling ones too, ".." after the link); missing components stay as they are.
func Resolve(p string) string {
	sep := string(filepath.Separator)
	vol := filepath.VolumeName(p)
	root := vol + sep
	todo := strings.Split(filepath.ToSlash(p[len(vol):]), "/")
	done := root
	links := 0
	for len(todo) > 0 {
		part := todo[0]
		todo = todo[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			done = filepath.Dir(done)
			continue
		}
		next := filepath.Join(done, part)
		fi, err := os.Lstat(next)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			done = next
			continue
		}
		target, err := os.Readlink(next)
		links++
		if err != nil || links > maxLinks {
			return filepath.Join(append([]string{next}, todo...)...)
		}
		if filepath.IsAbs(target) {
			vol = filepath.VolumeName(target)
			done = vol + sep
			target = target[len(vol):]
		}
		todo = append(strings.Split(filepath.ToSlash(target), "/"), todo...)
	}
	return done
}

// patternForms returns a path pattern's absolute forms, literal prefix resolved too.
func (c *call) patternForms(pattern string) []string {
	var abs []string
	if filepath.IsAbs(pattern) {
		abs = []string{filepath.Clean(pattern)}
	} else {
		for _, b := range c.bases {
			abs = append(abs, filepath.Join(b, pattern))
		}
	}
	var out []string
	for _, a := range abs {
		out = append(out, a)
		segs := strings.Split(filepath.ToSlash(a), "/")
		n := slices.IndexFunc(segs, func(s string) bool { return strings.ContainsAny(s, `*?[\`) })
		if n < 0 {
			n = len(segs)
		}
		if n <= 1 {
			continue
		}
		lit := filepath.FromSlash(strings.Join(segs[:n], "/"))
		if r := c.resolved.resolve(lit); r != lit {
			f := filepath.ToSlash(r)
			if n < len(segs) {
				f = strings.TrimSuffix(f, "/") + "/" + strings.Join(segs[n:], "/")
			}
			if f = filepath.FromSlash(f); !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// matchPath matches absolute name against absolute pattern (MatchSegments).
func matchPath(pattern, name string) bool {
	return MatchSegments(strings.Split(filepath.ToSlash(pattern), "/"), strings.Split(filepath.ToSlash(name), "/"))
}

// MatchSegments matches path segments against pattern segments (path.Match;
// "**" any number of segments) by a table, at most len(ps) × len(ns) matches.
func MatchSegments(ps, ns []string) bool {
	// next[j]: ps[i+1:] matches ns[j:]; cur[j] the same for ps[i:].
	next := make([]bool, len(ns)+1)
	cur := make([]bool, len(ns)+1)
	next[len(ns)] = true
	for i := len(ps) - 1; i >= 0; i-- {
		for j := len(ns); j >= 0; j-- {
			switch {
			case ps[i] == "**":
				cur[j] = next[j] || (j < len(ns) && cur[j+1])
			default:
				cur[j] = false
				if j < len(ns) && next[j+1] {
					ok, err := path.Match(ps[i], ns[j])
					cur[j] = err == nil && ok
				}
			}
		}
		next, cur = cur, next
	}
	return next[0]
}

// inside reports whether the real path of the call (resolved through
// symlinks) lies in one of the work dirs (as written or resolved).
func (c *call) inside(workDirs []string) bool {
	if c.def.RuleMatcher != bus.MatcherPath || !c.ok {
		return false
	}
	var dirs []string
	for _, a := range absDirs(workDirs) {
		dirs = append(dirs, a, c.resolved.resolve(a))
	}
	real, sep := c.real(), string(filepath.Separator)
	return slices.ContainsFunc(dirs, func(d string) bool {
		return real == d || strings.HasPrefix(real, strings.TrimSuffix(d, sep)+sep)
	})
}
