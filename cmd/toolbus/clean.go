package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// clean returns s for one line of a terminal, control characters, bidi
// controls and invalid UTF-8 written as Go escapes: what others wrote would
// otherwise reach the operator's terminal as escape sequences (session 18:
// TestAttackTerminalSpoofedConfirmation). A tool's output printed by call
// and fetch is left as it is.
func clean(s string) string {
	if strings.IndexFunc(s, escaped) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// escaped reports whether clean may escape r: a control or bidi control,
// or utf8.RuneError, which an invalid byte decodes to.
func escaped(r rune) bool {
	return r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

// cleanLines is clean for each line of s.
func cleanLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = clean(l)
	}
	return strings.Join(lines, "\n")
}
