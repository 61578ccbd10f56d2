package permission

import "strings"

// matchCommand matches a command pattern against one command s (already
// normalized): "git:*" matches "git" and "git ..."; a pattern with "*" is a
// glob anchored at both ends; a plain pattern matches s exactly, or as a
// substring when exact is false.
func matchCommand(pattern, s string, exact bool) bool {
	p := normalize(pattern)
	if prefix, ok := strings.CutSuffix(p, ":*"); ok && !strings.Contains(prefix, "*") {
		prefix = strings.TrimSpace(prefix)
		return prefix != "" && (s == prefix || strings.HasPrefix(s, prefix+" "))
	}
	if p == "" {
		return false
	}
	if strings.Contains(p, "*") {
		return glob(p, s)
	}
	if exact {
		return s == p
	}
	return strings.Contains(s, p)
}

// normalize trims s and collapses runs of white space into one space.
func normalize(s string) string {
	return strings.Join(strings.Fields(s), " ")
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

// splitCommand splits a shell command into its simple commands at &&, ||,
// &, ;, | and newlines outside quotes, each normalized. ok is false when
// the command cannot be trusted to be what its parts say: command or process
// substitution ($(, `, <(, >(), ANSI-C quoting ($'), or an unterminated
// quote. Redirections like 2>&1 and &> do not split.
func splitCommand(s string) (parts []string, ok bool) {
	var cur strings.Builder
	flush := func() {
		if p := normalize(cur.String()); p != "" {
			parts = append(parts, p)
		}
		cur.Reset()
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
			cur.WriteByte(ch)
			if ch == '\'' {
				state = plain
			}
			continue
		case double:
			cur.WriteByte(ch)
			switch {
			case ch == '\\' && i+1 < len(s):
				i++
				cur.WriteByte(s[i])
			case ch == '"':
				state = plain
			case ch == '`', ch == '$' && next(i) == '(':
				return nil, false
			}
			continue
		}
		switch ch {
		case '\\':
			cur.WriteByte(ch)
			if i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			}
		case '\'':
			state = single
			cur.WriteByte(ch)
		case '"':
			state = double
			cur.WriteByte(ch)
		case '`':
			return nil, false
		case '$', '<', '>':
			if n := next(i); n == '(' || (ch == '$' && n == '\'') {
				return nil, false
			}
			cur.WriteByte(ch)
		case '&':
			if i > 0 && (s[i-1] == '>' || s[i-1] == '<') || next(i) == '>' {
				cur.WriteByte(ch) // 2>&1, <&0, &>file
				continue
			}
			flush()
		case '|', ';', '\n', '\r':
			flush()
		default:
			cur.WriteByte(ch)
		}
	}
	if state != plain {
		return nil, false
	}
	flush()
	return parts, true
}

// looseParts returns what deny and ask rules are matched against: the whole
// command, then every piece between any separator or grouping character,
// quoted or not, and each of those with quotes and backslashes removed. It
// errs towards more candidates, since a deny rule that matches too much is
// safer than one that matches too little.
func looseParts(s string) []string {
	out := []string{normalize(s)}
	add := func(p string) {
		if p = normalize(p); p != "" {
			out = append(out, p)
		}
	}
	unquote := strings.NewReplacer(`'`, "", `"`, "", `\`, "")
	for _, p := range strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune("&|;\n\r`(){}", r) }) {
		add(p)
		add(unquote.Replace(p))
	}
	add(unquote.Replace(s))
	return out
}
