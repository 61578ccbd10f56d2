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
	if !needsClean(s) {
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

// needsClean reports whether clean would change s.
func needsClean(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return true
		}
		i += n
	}
	return false
}

// cleanLines is clean for each line of s.
func cleanLines(s string) string {
	if !needsClean(strings.ReplaceAll(s, "\n", "")) {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = clean(l)
	}
	return strings.Join(lines, "\n")
}
