package bus

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// The canonical form of a JSON value, as docs/protocol.md 3.1 (1.13)
// defines it: one text per value, so that two inputs hold the same JSON
// value exactly when their canonical texts are equal bytes; SameInput
// compares it and CallDigests hashes it. Members are sorted by the bytes of
// their canonical names (a name given twice keeps both, in order), strings
// unescaped but for `"`, `\` and control characters (a lone surrogate stays
// an escape, bytes that are not UTF-8 stay as they were), numbers in
// ECMAScript's layout of their exact digits (an exponent of more than 15
// digits as sent). Text that is not one JSON value, or nests deeper than
// maxCanonicalDepth, stands for itself.

// maxCanonicalDepth bounds canonical's recursion (routers refuse inputs
// nested deeper than schemas.MaxInputDepth anyway).
const maxCanonicalDepth = 1000

// canonicaliser writes the canonical form of one JSON text.
type canonicaliser struct {
	src     []byte
	i       int
	out     []byte
	buf     []byte   // lent by getCanonicaliser
	members []member // the members of the objects being written, innermost last
	scratch []byte   // an object's members while they are put in order
	digits  []byte   // a number's digits
}

// member is one member of an object in out: its name (canonical, quoted)
// is out[start:colon], its value out[colon+1:end].
type member struct{ start, colon, end int }

var canonicalisers = sync.Pool{New: func() any { return new(canonicaliser) }}

// getCanonicaliser takes a canonicaliser from the pool; its empty buf is
// lent to the caller until putCanonicaliser.
func getCanonicaliser() *canonicaliser { return canonicalisers.Get().(*canonicaliser) }

// putCanonicaliser gives c back with buf, the buffer it lent, grown.
func putCanonicaliser(c *canonicaliser, buf []byte) {
	c.src, c.out, c.members = nil, nil, c.members[:0]
	if cap(buf)+cap(c.scratch)+cap(c.digits) <= 64<<10 {
		c.buf = buf[:0]
		canonicalisers.Put(c)
	}
}

// canonical appends the canonical form of the JSON text src to dst (src
// itself when it is not one JSON value).
func (c *canonicaliser) canonical(dst, src []byte) []byte {
	c.src, c.i, c.out = src, 0, dst
	ok := c.value(0)
	if ok {
		c.space()
		ok = c.i == len(src)
	}
	out := c.out
	c.src, c.out = nil, nil
	if !ok {
		out = append(out[:len(dst)], src...)
	}
	return out
}

func (c *canonicaliser) space() {
	for c.i < len(c.src) {
		switch c.src[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

func (c *canonicaliser) value(depth int) bool {
	c.space()
	if c.i >= len(c.src) || depth > maxCanonicalDepth {
		return false
	}
	switch b := c.src[c.i]; {
	case b == '{':
		return c.object(depth)
	case b == '[':
		return c.array(depth)
	case b == '"':
		return c.str()
	case b == '-' || b >= '0' && b <= '9':
		return c.number()
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if bytes.HasPrefix(c.src[c.i:], []byte(lit)) {
			c.i += len(lit)
			c.out = append(c.out, lit...)
			return true
		}
	}
	return false
}

// open copies the bracket at src[i] and reports whether the container is
// empty: then its closing bracket cl is copied too.
func (c *canonicaliser) open(cl byte) bool {
	c.out = append(c.out, c.src[c.i])
	c.i++
	c.space()
	if c.i < len(c.src) && c.src[c.i] == cl {
		c.i++
		c.out = append(c.out, cl)
		return true
	}
	return false
}

func (c *canonicaliser) array(depth int) bool {
	if c.open(']') {
		return true
	}
	for {
		if !c.value(depth + 1) {
			return false
		}
		if more, ok := c.next(']'); !more {
			c.out = append(c.out, ']')
			return ok
		}
	}
}

// next reads what follows a member of a container: a comma, copied (more),
// or its closing bracket cl, not copied; ok is false for anything else.
func (c *canonicaliser) next(cl byte) (more, ok bool) {
	c.space()
	if c.i >= len(c.src) || c.src[c.i] != ',' && c.src[c.i] != cl {
		return false, false
	}
	c.i++
	if c.src[c.i-1] == cl {
		return false, true
	}
	c.out = append(c.out, ',')
	return true, true
}

func (c *canonicaliser) object(depth int) bool {
	begin := len(c.out)
	if c.open('}') {
		return true
	}
	first := len(c.members)
	for more, ok := true, true; more; {
		c.space()
		if c.i >= len(c.src) || c.src[c.i] != '"' {
			return false
		}
		m := member{start: len(c.out)}
		if !c.str() {
			return false
		}
		c.space()
		if c.i >= len(c.src) || c.src[c.i] != ':' {
			return false
		}
		c.i++
		m.colon = len(c.out)
		c.out = append(c.out, ':')
		if !c.value(depth + 1) {
			return false
		}
		m.end = len(c.out)
		c.members = append(c.members, m)
		if more, ok = c.next('}'); !ok {
			return false
		}
	}
	c.order(begin, c.members[first:])
	c.members = c.members[:first]
	c.out = append(c.out, '}')
	return true
}

// order rewrites the members ms of the object that starts at out[begin]
// ('{') sorted by name, members of one name in the order sent.
func (c *canonicaliser) order(begin int, ms []member) {
	byName := func(a, b member) int { return bytes.Compare(c.out[a.start:a.colon], c.out[b.start:b.colon]) }
	if slices.IsSortedFunc(ms, byName) {
		return
	}
	c.scratch = append(c.scratch[:0], c.out[begin+1:]...)
	base := begin + 1
	slices.SortStableFunc(ms, byName)
	c.out = c.out[:base]
	for k, m := range ms {
		if k > 0 {
			c.out = append(c.out, ',')
		}
		c.out = append(c.out, c.scratch[m.start-base:m.end-base]...)
	}
}

// str writes the string at src[i] ('"') canonically.
func (c *canonicaliser) str() bool {
	c.i++ // "
	c.out = append(c.out, '"')
	for c.i < len(c.src) {
		b := c.src[c.i]
		switch {
		case b == '"':
			c.i++
			c.out = append(c.out, '"')
			return true
		case b < 0x20:
			return false
		case b != '\\':
			run := c.i + 1 // a run of plain bytes, copied at once (≥ 0x80 as they are, UTF-8 or not)
			for run < len(c.src) && c.src[run] != '"' && c.src[run] != '\\' && c.src[run] >= 0x20 {
				run++
			}
			c.out = append(c.out, c.src[c.i:run]...)
			c.i = run
			continue
		}
		if c.i+1 >= len(c.src) {
			return false
		}
		e := c.src[c.i+1]
		c.i += 2
		if u := unescape(e); u != 0 {
			c.char(rune(u))
			continue
		}
		r, ok := c.hex4()
		if e != 'u' || !ok { // no escape but \uXXXX is left
			return false
		}
		if utf16.IsSurrogate(r) {
			if r < 0xdc00 && c.i+1 < len(c.src) && c.src[c.i] == '\\' && c.src[c.i+1] == 'u' {
				save := c.i
				c.i += 2
				lo, ok := c.hex4()
				if !ok {
					return false
				}
				if pair := utf16.DecodeRune(r, lo); pair != utf8.RuneError {
					c.out = utf8.AppendRune(c.out, pair)
					continue
				}
				c.i = save // not its pair: the next escape is read on its own
			}
			c.out = appendU(c.out, r) // a lone surrogate stays an escape
			continue
		}
		c.char(r)
	}
	return false
}

// The single-character escapes of JSON strings and the characters they
// stand for: all but '/' are how a canonical text writes them.
const (
	escapes = `"\/bfnrt`
	escaped = "\"\\/\b\f\n\r\t"
)

// char writes r, read from an escape, canonically.
func (c *canonicaliser) char(r rune) {
	switch k := strings.IndexRune(escaped, r); {
	case k >= 0 && r != '/':
		c.out = append(c.out, '\\', escapes[k])
	case r < 0x20:
		c.out = appendU(c.out, r)
	default:
		c.out = utf8.AppendRune(c.out, r)
	}
}

// hex4 reads the four hex digits of a \u escape.
func (c *canonicaliser) hex4() (rune, bool) {
	if c.i+4 > len(c.src) {
		return 0, false
	}
	var r rune
	for _, h := range c.src[c.i : c.i+4] {
		switch {
		case h >= '0' && h <= '9':
			h -= '0'
		case h >= 'a' && h <= 'f':
			h -= 'a' - 10
		case h >= 'A' && h <= 'F':
			h -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(h)
	}
	c.i += 4
	return r, true
}

// appendU appends r (below 0x10000) as a \u escape, lowercase.
func appendU(b []byte, r rune) []byte {
	return append(b, '\\', 'u', hexDigits[r>>12&15], hexDigits[r>>8&15], hexDigits[r>>4&15], hexDigits[r&15])
}

// skipDigits moves past the decimal digits at src[i].
func (c *canonicaliser) skipDigits() {
	for c.i < len(c.src) && c.src[c.i] >= '0' && c.src[c.i] <= '9' {
		c.i++
	}
}

// number writes the number at src[i] by its exact value, d × 10^e, in
// ECMAScript's Number::toString layout.
func (c *canonicaliser) number() bool {
	start := c.i
	neg := c.src[c.i] == '-'
	if neg {
		c.i++
	}
	d := c.digits[:0]
	intStart := c.i
	c.skipDigits()
	if c.i == intStart || c.src[intStart] == '0' && c.i-intStart > 1 {
		return false // no digit, or a leading zero
	}
	d = append(d, c.src[intStart:c.i]...)
	exp := 0
	if c.i < len(c.src) && c.src[c.i] == '.' {
		c.i++
		fracStart := c.i
		c.skipDigits()
		if c.i == fracStart {
			return false
		}
		d = append(d, c.src[fracStart:c.i]...)
		exp = -(c.i - fracStart)
	}
	c.digits = d
	if c.i < len(c.src) && (c.src[c.i] == 'e' || c.src[c.i] == 'E') {
		c.i++
		expNeg := false
		if c.i < len(c.src) && (c.src[c.i] == '+' || c.src[c.i] == '-') {
			expNeg = c.src[c.i] == '-'
			c.i++
		}
		expStart := c.i
		c.skipDigits()
		if c.i == expStart {
			return false
		}
		digits := bytes.TrimLeft(c.src[expStart:c.i], "0")
		if len(digits) > 15 { // beyond any float; kept as sent
			c.out = append(c.out, c.src[start:c.i]...)
			return true
		}
		e := 0
		for _, x := range digits {
			e = e*10 + int(x-'0')
		}
		if expNeg {
			e = -e
		}
		exp += e
	}
	d = bytes.TrimLeft(d, "0")
	if len(d) == 0 {
		c.out = append(c.out, '0') // -0 too
		return true
	}
	trimmed := bytes.TrimRight(d, "0")
	exp += len(d) - len(trimmed)
	d = trimmed
	if neg {
		c.out = append(c.out, '-')
	}
	c.out = appendDecimal(c.out, d, exp)
	return true
}

// appendDecimal appends d × 10^exp (d digits, no leading or trailing
// zero) as ECMAScript's Number::toString lays them out.
func appendDecimal(b, d []byte, exp int) []byte {
	k := len(d)
	n := k + exp
	switch {
	case k <= n && n <= 21:
		b = append(b, d...)
		for range n - k {
			b = append(b, '0')
		}
	case 0 < n && n <= 21:
		b = append(append(append(b, d[:n]...), '.'), d[n:]...)
	case -6 < n && n <= 0:
		b = append(b, '0', '.')
		for range -n {
			b = append(b, '0')
		}
		b = append(b, d...)
	default:
		b = append(b, d[0])
		if k > 1 {
			b = append(append(b, '.'), d[1:]...)
		}
		b = append(b, 'e')
		e := n - 1
		if e >= 0 {
			b = append(b, '+')
		} else {
			b = append(b, '-')
			e = -e
		}
		b = strconv.AppendInt(b, int64(e), 10)
	}
	return b
}
