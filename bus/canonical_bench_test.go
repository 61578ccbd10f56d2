package bus

import (
	"encoding/json"
	"testing"
)

// BenchmarkCallDigest: what the ledger's two digests cost a call that is
// not read-only (docs/performance.md): 1.12's, compacted, and 1.13's,
// canonical, of a typical input (a file write: a path and 1 KiB of text,
// members out of order).
func BenchmarkCallDigest(b *testing.B) {
	text := make([]byte, 1024)
	for i := range text {
		text[i] = 'a' + byte(i%26)
	}
	in := json.RawMessage(`{"path":"/tmp/x.txt","content":"` + string(text) + `","mode":420,"append":false}`)
	b.Run("compact", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			compactDigest("write_file", in)
		}
	})
	b.Run("canonical", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			callDigest("write_file", in)
		}
	})
}
