package bus

import "time"

// parseTime reads an RFC 3339 time as time.Parse(time.RFC3339Nano, s) does:
// the form toolbus writes by hand, anything else by time.Parse
// (FuzzParseTime holds them to one result).
func parseTime(s string) (time.Time, error) {
	if t, ok := parseUTC(s, true); ok {
		return t, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// validTime reports whether parseTime reads s, without making the time
// (Validate: an event's times are checked on every decode, used seldom).
func validTime(s string) bool {
	if _, ok := parseUTC(s, false); ok {
		return true
	}
	_, err := time.Parse(time.RFC3339Nano, s)
	return err == nil
}

// parseUTC reads s when it is YYYY-MM-DDTHH:MM:SS[.F{1,9}]Z with a day
// below 29 and the other fields in range; ok is false for anything else.
// Without date, only ok is reported (the time is zero).
func parseUTC(s string, date bool) (time.Time, bool) {
	n := len(s)
	if n < len("2006-01-02T15:04:05Z") || n > len("2006-01-02T15:04:05.999999999Z") || s[n-1] != 'Z' ||
		s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	year := decimal(s, 0, 4)
	month, day := decimal(s, 5, 2), decimal(s, 8, 2)
	hour, minute, sec := decimal(s, 11, 2), decimal(s, 14, 2), decimal(s, 17, 2)
	if year < 0 || month < 1 || month > 12 || day < 1 || day > 28 ||
		hour < 0 || hour > 23 || minute < 0 || minute > 59 || sec < 0 || sec > 59 {
		return time.Time{}, false
	}
	nsec := 0
	if n > len("2006-01-02T15:04:05Z") {
		if s[19] != '.' || n == len("2006-01-02T15:04:05.Z") {
			return time.Time{}, false
		}
		if nsec = decimal(s, 20, n-21); nsec < 0 {
			return time.Time{}, false
		}
		for range 30 - n { // to nanoseconds: 9 digits
			nsec *= 10
		}
	}
	if !date {
		return time.Time{}, true
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

// decimal is the decimal number of s[i:i+n], or -1 when one is not a digit.
func decimal(s string, i, n int) int {
	v := 0
	for _, c := range []byte(s[i : i+n]) {
		if c < '0' || c > '9' {
			return -1
		}
		v = v*10 + int(c-'0')
	}
	return v
}

// second is the text of one UTC second, "2006-01-02T15:04:05", kept per P
// (local): the times of one second format only their fraction, and the
// date and time by time.RFC3339's fast path once a second.
type second struct {
	unix int64
	text []byte // nil until the first
}

// appendUTC appends UTC time t as t.AppendFormat does with timeLayout (ms:
// three digits of fraction) or time.RFC3339Nano (the digits t needs)
// (FuzzAppendTime holds them to one result).
func (c *second) appendUTC(b []byte, t time.Time, ms bool) []byte {
	if u := t.Unix(); u != c.unix || c.text == nil {
		c.unix, c.text = u, t.AppendFormat(c.text[:0], time.RFC3339) // ends in Z: t is UTC
		c.text = c.text[:len(c.text)-1]
	}
	b = append(b, c.text...)
	ns := t.Nanosecond()
	if ms {
		ms := ns / 1e6
		return append(b, '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
	}
	if ns > 0 {
		f := [10]byte{'.'}
		for i := 9; i > 0; i, ns = i-1, ns/10 {
			f[i] = byte('0' + ns%10)
		}
		n := len(f)
		for f[n-1] == '0' {
			n--
		}
		b = append(b, f[:n]...)
	}
	return append(b, 'Z')
}
