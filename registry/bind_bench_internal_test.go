package registry

import (
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// BenchmarkBeatValue is what binding adds to a beat's P_workers value: its
// encoding with the account beside the beat (record) and its decoding (the
// watch), against the beat alone (docs/performance.md, session 30).
//
//	go test -run - -bench BeatValue -benchmem ./registry/
func BenchmarkBeatValue(b *testing.B) {
	bv := bus.WorkerBeat{InFlight: []string{"s1.r1.c1"}, Binary: true, Compact: true}
	for _, account := range []string{"", "toolbus-worker-deployer"} {
		b.Run("encode/"+cmpName(account), func(b *testing.B) {
			for b.Loop() {
				_ = encodeStored(bv, account)
			}
		})
		val := encodeStored(bv, account)
		b.Run("decode/"+cmpName(account), func(b *testing.B) {
			for b.Loop() {
				_ = decodeStored(val)
			}
		})
	}
	b.Run("encode/before", func(b *testing.B) {
		for b.Loop() {
			_ = bv.Encode()
		}
	})
	val := bv.Encode()
	b.Run("decode/before", func(b *testing.B) {
		for b.Loop() {
			_ = bus.DecodeWorkerBeat(val)
		}
	})
}

func cmpName(account string) string {
	if account == "" {
		return "none"
	}
	return "account"
}
