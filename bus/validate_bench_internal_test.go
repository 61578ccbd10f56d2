package bus

import (
	"testing"
	"time"
)

// BenchmarkValidate is the check of an exec request's attributes, with
// its time and expiry.
func BenchmarkValidate(b *testing.B) {
	e := Head(TypeExec, "toolbus/router/r1")
	e.SessionID, e.ReplyID, e.ToolCallID = "bench-session-0001", "M3CgXPmzZg1495hoVjoRqG", "c1"
	e.DataContentType, e.ExpiryTime = ContentTypeJSON, FormatExpiry(time.Now().Add(time.Hour))
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}
