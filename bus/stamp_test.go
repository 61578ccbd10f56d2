package bus

import (
	"testing"
	"time"
)

// stampValid accepts exactly what time.Parse(time.RFC3339Nano) accepts.
func TestStampValid(t *testing.T) {
	for _, s := range []string{
		"2026-12-04T06:02:59.123Z", "2024-02-29T23:59:59.999Z", "2023-02-29T00:00:00.000Z", "2026-13-01T00:00:00.000Z",
		"2026-00-10T00:00:00.000Z", "2026-04-31T00:00:00.000Z", "2026-04-30T24:00:00.000Z", "2026-04-30T23:60:00.000Z",
		"2026-04-30T23:59:60.000Z", "2026-04-00T00:00:00.000Z", "0000-01-01T00:00:00.000Z", "2100-02-29T00:00:00.000Z",
		"2000-02-29T00:00:00.000Z", "2026-1a-01T00:00:00.000Z", "2026-01-01t00:00:00.000Z", "2026-01-01T00:00:00,000Z",
		"2026-01-01T00:00:00.00aZ", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00.123456789+02:00", "", "x",
		"2026-01-01T00:00:00.000z", "+026-01-01T00:00:00.000Z", "2026-01-01 00:00:00.000Z",
	} {
		_, err := time.Parse(time.RFC3339Nano, s)
		if got := stampValid(s); got != (err == nil) {
			t.Errorf("stampValid(%q) = %v, time.Parse says %v", s, got, err)
		}
	}
}

func FuzzStampValid(f *testing.F) {
	f.Add("2026-12-04T06:02:59.123Z")
	f.Add("2024-02-29T23:59:59.999Z")
	f.Add("2026-04-31T00:00:00.000Z")
	f.Fuzz(func(t *testing.T, s string) {
		_, err := time.Parse(time.RFC3339Nano, s)
		if got := stampValid(s); got != (err == nil) {
			t.Errorf("stampValid(%q) = %v, time.Parse says %v", s, got, err)
		}
	})
}
