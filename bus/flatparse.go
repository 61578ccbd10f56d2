package bus

import "strings"

// flatParser reads the plain JSON toolbus's senders write (ExecData,
// ReplyData): objects, arrays, strings of printable ASCII with the
// one-character escapes, integers, null, true and false. Each method
// reports false at anything else, valid JSON or not: the caller then
// leaves the input to a general decoder.
type flatParser struct {
	b []byte
	i int
}

func (p *flatParser) skip() { p.i = skipSpace(p.b, p.i) }

// take reads byte c after any whitespace.
func (p *flatParser) take(c byte) bool {
	p.skip()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
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

// object reads {"key": value, ...}, member reading each value.
func (p *flatParser) object(member func(key []byte) bool) bool {
	if !p.take('{') {
		return false
	}
	if p.take('}') {
		return true
	}
	for {
		key, ok := p.str()
		if !ok || !p.take(':') || !member(key) {
			return false
		}
		if p.take('}') {
			return true
		}
		if !p.take(',') {
			return false
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
		if p.take(']') {
			return true
		}
		if !p.take(',') {
			return false
		}
	}
}

// str reads a string of printable ASCII whose escapes are \" \\ \/ \b \f
// \n \r \t, and returns it as it is in the data, quotes aside.
func (p *flatParser) str() ([]byte, bool) {
	p.skip()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			s := p.b[p.i+1 : j]
			p.i = j + 1
			return s, true
		case c == '\\':
			if j+1 >= len(p.b) || unescape(p.b[j+1]) == 0 {
				return nil, false
			}
			j++
		case c < 0x20 || c > 0x7e:
			return nil, false
		}
	}
	return nil, false
}

// digits reads the digits of a JSON integer without sign or fraction.
func (p *flatParser) digits() ([]byte, bool) {
	p.skip()
	j := p.i
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
		j++
	}
	if j == p.i || j < len(p.b) && (p.b[j] == '.' || p.b[j] == 'e' || p.b[j] == 'E') {
		return nil, false
	}
	d := p.b[p.i:j]
	p.i = j
	return d, true
}

// unescape is the byte a one-character escape \c stands for; 0 for none.
func unescape(c byte) byte {
	switch c {
	case '"', '\\', '/':
		return c
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return 0
}

// appendUnescaped writes s, a string str read, with its escapes undone.
func appendUnescaped(w *strings.Builder, s []byte) {
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			w.WriteByte(unescape(s[i]))
			continue
		}
		w.WriteByte(s[i])
	}
}

// unescapedLen is the length of s, a string str read, unescaped.
func unescapedLen(s []byte) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			n--
			i++
		}
	}
	return n
}

// raw reads a value and returns it as it is in the data: an object or an
// array (checked to be JSON), a string without escapes, null, true, false
// or an integer of at most 9 digits.
func (p *flatParser) raw() ([]byte, bool) {
	p.skip()
	start := p.i
	if p.i >= len(p.b) {
		return nil, false
	}
	switch c := p.b[p.i]; {
	case c == '{' || c == '[':
		end, ok := flatValue(p.b, p.i)
		if !ok {
			return nil, false
		}
		p.i = end
	case c == '"':
		_, next, ok := flatString(p.b, p.i)
		if !ok {
			return nil, false
		}
		p.i = next
	case p.literal("null") || p.literal("true") || p.literal("false"):
	default:
		d, ok := p.digits()
		if _, isInt := flatInt(d); !ok || !isInt {
			return nil, false
		}
	}
	return p.b[start:p.i:p.i], true
}
