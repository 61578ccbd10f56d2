package security

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/security"
)

// TestAttackWorkerHoldsServerMemory (session 29, red team): a message a
// runner sends into the main account with a reply subject makes the server
// keep its way back (a response import, some 350 bytes) until it is answered
// or the export's response threshold passes. Nobody answers what a worker
// sends to a router's exec inbox, so 20,000 such messages with a reply were
// held for NATS' default two minutes: a worker flooding them grew the
// server's memory by the rate times two minutes. The inboxes' exports now
// hold them 1 s.
func TestAttackWorkerHoldsServerMemory(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	w := d.conn(security.RoleWorker)
	sub, err := w.nc.SubscribeSync("toolbus.exec.greet")
	must(t, err)
	must(t, w.nc.Flush())
	_, err = d.conn("session-s2").client().Call(testCtx(t), "s2", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet", Input: client.Input(map[string]string{"who": "x"})}}})
	must(t, err)
	m, err := sub.NextMsg(bound)
	must(t, err)
	mux := m.Reply[:strings.LastIndex(m.Reply, ".")] // the router's exec inbox
	main, err := d.srv.LookupAccount("toolbus")
	must(t, err)
	const n = 20000
	for i := range n {
		must(t, w.nc.PublishMsg(&nats.Msg{Subject: fmt.Sprintf("%s.x%d", mux, i), Reply: "_INBOX.worker.x", Data: []byte(`{}`)}))
	}
	must(t, w.nc.FlushTimeout(time.Minute))
	held := main.NumPendingAllResponses()
	deadline := time.Now().Add(bound)
	// What is left is the worker's own pending pulls of its durable tool.
	for main.NumPendingAllResponses() > 8 {
		if time.Now().After(deadline) {
			t.Fatalf("the server still holds %d of the worker's %d messages' ways back after %v (%d at the end of the flood)", main.NumPendingAllResponses(), n, bound, held)
		}
		time.Sleep(20 * time.Millisecond) // bounded polling of the server's count
	}
	w.noViolations()
}
