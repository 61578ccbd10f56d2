package bus

import (
	"errors"
	"testing"
	"time"
)

// FuzzParseTime holds parseTime to time.Parse(time.RFC3339Nano): the same
// instant in the same zone (== where both are UTC: the fast path's) or
// both an error; and validTime to time.Parse's error.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{
		"2026-12-05T10:11:28.123Z", "2026-12-05T10:11:28Z", "2026-12-05T10:11:28.123456789Z",
		"2026-12-05T10:11:28.1234567891Z", "2026-02-29T10:11:28Z", "2024-02-29T00:00:00Z",
		"2026-12-31T23:59:59.999Z", "2026-12-05T24:00:00Z", "2026-12-05T10:60:00Z", "2026-12-05T10:11:60Z",
		"2026-13-05T10:11:28Z", "2026-00-05T10:11:28Z", "2026-12-00T10:11:28Z", "2026-12-05T10:11:28.Z",
		"2026-12-05T10:11:28,123Z", "2026-12-05t10:11:28Z", "2026-12-05T10:11:28z", "2026-12-05T10:11:28+01:00",
		"0000-01-01T00:00:00Z", "9999-12-28T23:59:59.9Z", "2026-12-05T10:11:28.12a4Z", "+026-12-05T10:11:28Z",
		"2026-1-05T10:11:28Z", "0000-01-01T0:00:00+00:01", "", "Z", FormatExpiry(time.Now()), stampTime(),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, werr := time.Parse(time.RFC3339Nano, s)
		got, err := parseTime(s)
		gz, goff := got.Zone()
		wz, woff := want.Zone()
		same := got.Equal(want) && gz == wz && goff == woff && (want.Location() != time.UTC || got == want)
		if (err == nil) != (werr == nil) || !same {
			t.Fatalf("parseTime(%q) = %v, %v; time.Parse: %v, %v", s, got, err, want, werr)
		}
		if validTime(s) != (werr == nil) {
			t.Fatalf("validTime(%q) = %v; time.Parse: %v", s, validTime(s), werr)
		}
	})
}

func stampTime() string { _, at := stamp(); return at }

// BenchmarkParseTime is one event time read, by parseTime and by
// time.Parse.
func BenchmarkParseTime(b *testing.B) {
	s := stampTime()
	b.Run("parseTime", func(b *testing.B) {
		for b.Loop() {
			if _, err := parseTime(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("time.Parse", func(b *testing.B) {
		for b.Loop() {
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzAppendTime holds appendUTC to time.Time.AppendFormat (timeLayout
// and time.RFC3339Nano) for any UTC instant (seconds and nanoseconds from
// the fuzzer), its second's text made afresh and kept from another
// instant of that second.
func FuzzAppendTime(f *testing.F) {
	for _, t := range []time.Time{
		time.Now(), time.Unix(0, 0), time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 23, 59, 59, 1, time.UTC),
		time.Date(2026, 12, 6, 5, 4, 3, 120000000, time.UTC), time.Date(2026, 12, 6, 5, 4, 3, 7000000, time.UTC),
	} {
		f.Add(t.Unix(), int64(t.Nanosecond()))
	}
	f.Fuzz(func(t *testing.T, sec, nsec int64) {
		at := time.Unix(sec, nsec%1e9).UTC()
		other := time.Unix(at.Unix(), int64(at.Nanosecond()+333333333)%1e9).UTC()
		for _, layout := range []string{timeLayout, time.RFC3339Nano} {
			var fresh, kept second
			kept.appendUTC(nil, other, false)
			want := at.AppendFormat([]byte("x"), layout)
			for _, c := range []*second{&fresh, &kept} {
				if got := c.appendUTC([]byte("x"), at, layout == timeLayout); string(got) != string(want) {
					t.Fatalf("appendUTC(%v, %s) = %q; AppendFormat: %q", at, layout, got, want)
				}
			}
		}
	})
}

// BenchmarkAppendTime is one event time formatted, by appendUTC (its
// second's text kept) and by time.Time.AppendFormat.
func BenchmarkAppendTime(b *testing.B) {
	t, buf := time.Now().UTC(), make([]byte, 0, 64)
	var c second
	b.Run("appendUTC", func(b *testing.B) {
		for b.Loop() {
			buf = c.appendUTC(buf[:0], t, true)
		}
	})
	b.Run("AppendFormat", func(b *testing.B) {
		for b.Loop() {
			buf = t.AppendFormat(buf[:0], timeLayout)
		}
	})
}

// TestValidateRefusesBadTimes: Validate checks time and expirytime without
// making them (validTime), and still refuses what time.Parse refuses, the
// days a month lacks among them (docs/security.md).
func TestValidateRefusesBadTimes(t *testing.T) {
	for _, s := range []string{"2026-02-29T10:11:28Z", "2026-02-30T10:11:28Z", "2026-04-31T00:00:00Z", "2026-12-05T24:00:00Z",
		"2026-12-05T10:11:28.Z", "2026-13-05T10:11:28Z", "2026-12-05", "bad"} {
		for _, attr := range []string{"time", "expirytime"} {
			e := Head(TypeExec, "toolbus/router/r1")
			if attr == "time" {
				e.Time = s
			} else {
				e.ExpiryTime = s
			}
			var be *Error
			if err := e.Validate(); !errors.As(err, &be) || be.Code != CodeBadEvent {
				t.Errorf("%s %q: Validate = %v, want bad_event", attr, s, err)
			}
		}
	}
	e := Head(TypeExec, "toolbus/router/r1")
	e.ExpiryTime = "2024-02-29T23:59:59.999999999Z"
	if err := e.Validate(); err != nil {
		t.Errorf("a leap day: %v", err)
	}
}
