package bench

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// BenchmarkDecodeHeaders is what nats.go (go.mod's version) spends parsing
// the header of a message it delivers (issue 27, docs/performance.md): a
// binary-mode io.toolbus.exec.result as a worker sends it (its ce-*
// attributes), the one message with such a header a router takes in per
// read-only call, and a header of one field.
//
//	go test -run - -bench DecodeHeaders -benchmem ./bench/
var execResultHeader = []byte("NATS/1.0\r\nce-specversion: 1.0\r\nce-id: 6Ipx1d5Ao2e4KNF6G3fYbT\r\nce-source: toolbus/worker/w1\r\nce-type: io.toolbus.exec.result\r\nce-time: 2026-12-03T21:50:00.123456789Z\r\nce-sessionid: s1\r\nce-replyid: 6Ipx1d5Ao2e4KNF6G3fYaa\r\nce-toolcallid: c1\r\nContent-Type: application/json\r\n\r\n")
var oneHeader = []byte("NATS/1.0\r\nContent-Type: application/json\r\n\r\n")

// compactExecHeader is a compact exec's header (docs/protocol.md 5.1), what a
// worker's connection parses per read-only call (session 30).
var compactExecHeader = []byte("NATS/1.0\r\nce-specversion: 1.0\r\nce-id: M3CgXPmzZg1495hoVjoRqG\r\nce-source: toolbus/router/r1\r\nce-type: io.toolbus.exec\r\nce-sessionid: bench-session-0001\r\nce-replyid: 6Ipx1d5Ao2e4KNF6G3fYaa\r\nce-toolcallid: c1\r\nce-expirytime: 2026-12-06T15:59:00.123456789Z\r\n\r\n")

func BenchmarkDecodeHeaders(b *testing.B) {
	for _, tc := range []struct {
		name string
		h    []byte
	}{{"exec.result-9", execResultHeader}, {"exec-compact-8", compactExecHeader}, {"one", oneHeader}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := nats.DecodeHeadersMsg(tc.h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
