package bus

import (
	"encoding/json"
	"math/bits"
	"strconv"
	"strings"

	fastjson "github.com/goccy/go-json"
)

// flatParser reads the plain JSON toolbus's senders write (objects, arrays,
// printable-ASCII strings with one-character escapes, integers, null, true,
// false) in place and without allocating; each method reports false at
// anything else, leaving the input to a general decoder.
type flatParser struct {
	b         []byte
	i         int
	unchecked bool // raw leaves objects and arrays unchecked (DecodeHead)
}

// skip reads any whitespace (a byte above ' ' ends it at once).
func (p *flatParser) skip() {
	for p.i < len(p.b) && space(p.b[p.i]) {
		p.i++
	}
}

// space reports whether c is JSON whitespace.
func space(c byte) bool { return c <= ' ' && (c == ' ' || c == '\t' || c == '\n' || c == '\r') }

// take reads byte c after any whitespace; the senders write none, so the
// usual read is one compare.
func (p *flatParser) take(c byte) bool {
	b, i := p.b, p.i
	for i < len(b) && b[i] != c && space(b[i]) {
		i++
	}
	if i < len(b) && b[i] == c {
		p.i = i + 1
		return true
	}
	p.i = i
	return false
}

// next reads the byte after any whitespace, 0 at the end: the separator
// after a member or an element.
func (p *flatParser) next() byte {
	b, i := p.b, p.i
	for ; i < len(b); i++ {
		if c := b[i]; !space(c) {
			p.i = i + 1
			return c
		}
	}
	p.i = i
	return 0
}

// validJSON is json.Valid, the plain form read by checked instead (a tenth
// of the instructions for a call's usual input).
func validJSON(b []byte) bool {
	p := flatParser{b: b}
	return p.checked(maxCheckedDepth) && p.end() || json.Valid(b)
}

// end reports whether only whitespace is left.
func (p *flatParser) end() bool {
	p.skip()
	return p.i == len(p.b)
}

func (p *flatParser) literal(w string) bool {
	p.skip()
	if len(p.b)-p.i >= len(w) && string(p.b[p.i:p.i+len(w)]) == w {
		p.i += len(w)
		return true
	}
	return false
}

// object reads {"key": value, ...}: member reads the value of the member
// named key and returns a bit naming the member, 0 to refuse it. A member
// given twice is refused. seen has the bits of the members read.
func (p *flatParser) object(member func(key []byte) uint16) (seen uint16, ok bool) {
	if !p.take('{') {
		return 0, false
	}
	if p.take('}') {
		return 0, true
	}
	for {
		key, ok := p.str()
		if !ok || !p.take(':') {
			return 0, false
		}
		bit := member(key)
		if bit == 0 || seen&bit != 0 {
			return 0, false
		}
		seen |= bit
		if c := p.next(); c != ',' {
			return seen, c == '}'
		}
	}
}

// array reads [value, ...], elem reading each.
func (p *flatParser) array(elem func() bool) bool {
	if !p.take('[') {
		return false
	}
	if p.take(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if c := p.next(); c != ',' {
			return c == ']'
		}
	}
}

// str reads a string of printable ASCII whose escapes are \" \\ \/ \b \f
// \n \r \t, and returns it as it is in the data, quotes aside.
func (p *flatParser) str() ([]byte, bool) {
	s, _, ok := p.quoted()
	return s, ok
}

// plain reads a string without escapes.
func (p *flatParser) plain() ([]byte, bool) {
	s, escaped, ok := p.quoted()
	return s, ok && !escaped
}

// quoted is str, also reporting whether the string has escapes. It
// scans as plainRun does, inline: a call would spill what it holds.
func (p *flatParser) quoted() (s []byte, escaped, ok bool) {
	b, i := p.b, p.i
	for i < len(b) && space(b[i]) {
		i++
	}
	if i >= len(b) || b[i] != '"' {
		return nil, false, false
	}
	for j := i + 1; j < len(b); j += 2 {
		if j+8 <= len(b) {
			if m := notPlain(word(b[j : j+8])); m == 0 {
				j += 6 // and 2 more
				continue
			} else {
				j += bits.TrailingZeros64(m) / 8
			}
		} else if plainByte[b[j]] {
			j-- // and 2 more
			continue
		}
		switch {
		case b[j] == '"':
			p.i = j + 1
			return b[i+1 : j], escaped, true
		case b[j] != '\\' || j+1 >= len(b) || unescape(b[j+1]) == 0:
			return nil, false, false
		}
		escaped = true
	}
	return nil, false, false
}

// plainRun is the length of s's leading run of plainBytes: eight bytes at
// a time while they last (notPlain), then byte by byte.
func plainRun[T string | []byte](s T) int {
	j := 0
	for ; j+8 <= len(s); j += 8 {
		if m := notPlain(word(s[j : j+8])); m != 0 {
			return j + bits.TrailingZeros64(m)/8
		}
	}
	for ; j < len(s); j++ {
		if !plainByte[s[j]] {
			return j
		}
	}
	return len(s)
}

// word is the eight bytes of b, the first lowest (one load).
func word[T string | []byte](b T) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// ones has a one in each byte; each byte of ones*0x80 is its high bit.
const ones = 0x0101010101010101

// notPlain has the high bit of each byte of w that is not a plainByte set,
// and maybe more above the lowest: each term sets it where w has a byte of
// its kind (and may above one), below ' ', above '~', '"', '\\' (zero
// after the xor).
func notPlain(w uint64) uint64 {
	quote, backslash := w^'"'*ones, w^'\\'*ones
	below := (w - ' '*ones) &^ w
	above := (w + (0x7f-'~')*ones) | w
	return (below | above | (quote-ones)&^quote | (backslash-ones)&^backslash) & (0x80 * ones)
}

// plainByte is true for the bytes a JSON string holds as they are:
// printable ASCII but the quote and the backslash.
var plainByte = func() (t [256]bool) {
	for c := ' '; c <= '~'; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// uint reads a JSON integer of at most max digits that fits a uint64,
// without sign, fraction or leading zeros.
func (p *flatParser) uint(max int) (uint64, bool) {
	p.skip()
	var n uint64
	j := p.i
	for ; j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9'; j++ {
		n = n*10 + uint64(p.b[j]-'0')
	}
	d := p.b[p.i:j]
	if len(d) == 0 || len(d) > max || d[0] == '0' && len(d) > 1 ||
		j < len(p.b) && (p.b[j] == '.' || p.b[j] == 'e' || p.b[j] == 'E') {
		return 0, false
	}
	if len(d) == 20 { // 19 digits always fit
		var err error
		if n, err = strconv.ParseUint(string(d), 10, 64); err != nil {
			return 0, false
		}
	}
	p.i = j
	return n, true
}

// unescape is the byte a one-character escape \c stands for; 0 for none
// (a table, so that it inlines and its callers keep their registers).
func unescape(c byte) byte { return unescapes[c] }

var unescapes = func() (t [256]byte) {
	for k := range len(escapes) {
		t[escapes[k]] = escaped[k]
	}
	return t
}()

// addUnescaped is addString for s, a string str read, with its escapes undone.
func addUnescaped(w *strings.Builder, s []byte) string {
	off := w.Len()
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			w.WriteByte(unescape(s[i]))
			continue
		}
		w.WriteByte(s[i])
	}
	return w.String()[off:]
}

// addString writes v to w and returns it as a string that shares w's buffer.
func addString(w *strings.Builder, v []byte) string {
	off := w.Len()
	w.Write(v)
	return w.String()[off:]
}

// addKnown is the one of consts that v spells, else addString's.
func addKnown(w *strings.Builder, v []byte, consts []string) string {
	if c, ok := knownValue(v, consts); ok {
		return c
	}
	return addString(w, v)
}

// raw reads a value whose first byte is one of kinds and returns it as it
// is in the data: an object or an array (checked to be JSON unless
// p.unchecked), a string without escapes, null, true, false or an integer
// of at most 9 digits.
func (p *flatParser) raw(kinds string) ([]byte, bool) {
	p.skip()
	start := p.i
	if p.i >= len(p.b) || strings.IndexByte(kinds, p.b[p.i]) < 0 {
		return nil, false
	}
	switch c := p.b[p.i]; {
	case c == '{' || c == '[':
		end, ok := p.value()
		if !ok {
			return nil, false
		}
		p.i = end
	case c == '"':
		if _, ok := p.plain(); !ok {
			return nil, false
		}
	case p.literal("null") || p.literal("true") || p.literal("false"):
	default:
		if _, ok := p.uint(9); !ok {
			return nil, false
		}
	}
	return p.b[start:p.i:p.i], true
}

// anyValue is raw's kinds for every value it reads.
const anyValue = `{["ntf0123456789`

// value finds the end of the JSON object or array at p.i, checked to be
// JSON unless p.unchecked: by checked when it reads it, else by scan.
func (p *flatParser) value() (end int, ok bool) {
	start := p.i
	if p.checked(maxCheckedDepth) {
		return p.i, true
	}
	p.i = start
	return p.scan()
}

// scan finds the end of the object or array at p.i by its brackets, then
// asks the general checker unless p.unchecked.
func (p *flatParser) scan() (end int, ok bool) {
	depth, in := 0, false
	for j := p.i; j < len(p.b); j++ {
		c := p.b[j]
		switch {
		case in:
			if c == '\\' {
				j++
			} else if c == '"' {
				in = false
			}
		case c == '"':
			in = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth == 0 {
				return j + 1, p.unchecked || fastjson.Valid(p.b[p.i:j+1])
			}
		}
	}
	return 0, false
}

// maxCheckedDepth bounds checked's nesting; deeper values go the long way.
const maxCheckedDepth = 32

// checked reads one JSON value of the plain form (str's strings, integers
// without fraction or exponent, literals; members may repeat, as JSON
// allows) nested at most depth deep, and reports false at anything else,
// which value leaves to the general checker (FuzzChecked).
func (p *flatParser) checked(depth int) bool {
	p.skip()
	if p.i >= len(p.b) || depth == 0 {
		return false
	}
	switch c := p.b[p.i]; c {
	case '{', '[':
		p.i++
		close := c + 2 // '}' and ']' are two above their openers
		if p.take(close) {
			return true
		}
		for {
			if c == '{' {
				if _, ok := p.str(); !ok || !p.take(':') {
					return false
				}
			}
			if !p.checked(depth - 1) {
				return false
			}
			if c := p.next(); c != ',' {
				return c == close
			}
		}
	case '"':
		_, ok := p.str()
		return ok
	case 't', 'f', 'n':
		return p.literal("true") || p.literal("false") || p.literal("null")
	case '-':
		if p.i++; p.i == len(p.b) || space(p.b[p.i]) { // uint would read past it
			return false
		}
	}
	_, ok := p.uint(19)
	return ok
}

// dataAs is e.DataAs(r) through a new T, so that r may stay on its caller's stack.
func dataAs[T any](e *Event, r *T) error {
	d := new(T)
	err := e.DataAs(d)
	*r = *d
	return err
}
