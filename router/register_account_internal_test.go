package router

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// BenchmarkSenderAccount is the router's reading of a registration's
// account: the header nats-server 2.15.3 sets across an import (session 30).
func BenchmarkSenderAccount(b *testing.B) {
	m := &nats.Msg{Reply: "_R_.abc.def", Header: nats.Header{}}
	m.Header.Set(bus.HeaderRequestInfo, `{"acc":"toolbus-worker-deployer","rtt":"1.2ms"}`)
	for b.Loop() {
		if acc, err := senderAccount(m); err != nil || acc != "toolbus-worker-deployer" {
			b.Fatal(acc, err)
		}
	}
}
