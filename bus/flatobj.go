package bus

// The plain-form scanners' walks over a JSON object's members and an
// array's elements (decodeExecResultFlat, decodeBatchFlat).

// flatMembers reads the JSON object at b[i], at least one member, each key
// a plain string: member reads the value at index at of the member named
// key and returns a bit naming the member (0 refuses it) and the index
// after the value. A member given twice is refused. seen has the bits of
// the members read; next is the index after the object.
func flatMembers(b []byte, i int, member func(key []byte, at int) (bit uint8, next int, ok bool)) (seen uint8, next int, ok bool) {
	if i >= len(b) || b[i] != '{' {
		return 0, 0, false
	}
	for first := true; ; first = false {
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return 0, 0, false
		}
		if b[i] == '}' {
			return seen, i + 1, !first
		}
		if !first {
			if b[i] != ',' {
				return 0, 0, false
			}
			i = skipSpace(b, i+1)
		}
		key, next, ok := flatString(b, i)
		if !ok {
			return 0, 0, false
		}
		if i = skipSpace(b, next); i >= len(b) || b[i] != ':' {
			return 0, 0, false
		}
		bit, next, ok := member(key, skipSpace(b, i+1))
		if !ok || bit == 0 || seen&bit != 0 {
			return 0, 0, false
		}
		seen |= bit
		i = next - 1
	}
}

// flatArray reads the JSON array at b[i]: elem reads the element at index
// at and returns the index after it. next is the index after the array.
func flatArray(b []byte, i int, elem func(at int) (next int, ok bool)) (next int, ok bool) {
	if i >= len(b) || b[i] != '[' {
		return 0, false
	}
	if i = skipSpace(b, i+1); i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		if i, ok = elem(i); !ok {
			return 0, false
		}
		if i = skipSpace(b, i); i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ']':
			return i + 1, true
		case ',':
			i = skipSpace(b, i+1)
		default:
			return 0, false
		}
	}
}
