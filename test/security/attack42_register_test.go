package security

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/security"
)

// TestAttackRegistrationsAtMaxPayload (session 42, regrate42; session 41's
// open row): what a registration costs a router is proportional to its
// bytes (~0.15 s of CPU for 8 MiB, 2 s under -race), and a worker login
// sent max-payload registrations in a loop, each decoded by the router that
// took it: here a definition of 8 MiB (refused past 128 KiB once decoded)
// and a valid registration padded to 8 MiB under a new worker id, in turn.
// Now the router charges each to its login's NATS account before the
// decode, at 1 MiB a second after 8 MiB of burst here: past it the
// registration is refused limit_exceeded unread, and nothing of it is
// stored (no liveness key of its worker id). Counted: the registrations
// decoded, at most the burst and what the rate let in meanwhile (all 10
// before the fix). Another login's fleet of 100 workers registering at once
// right after is taken whole.
func TestAttackRegistrationsAtMaxPayload(t *testing.T) {
	const rate = 1 << 20
	sp := spec
	sp.Workers = []security.Handler{{Name: "big", Tools: []string{"big"}}}
	d := newDeploymentOf(t, sp, func(c *router.Config) { c.RegisterRate = rate })
	w := d.conn("worker-big")
	subject := bus.NewSubjects("").Workers.Register("big")
	maxPayload := int(w.nc.MaxPayload())
	schema := json.RawMessage(`{"type":"object","properties":{}}`)
	message := func(i int) *bus.Event { // ~1 KiB under the max payload
		def := bus.ToolDef{Name: "big", Description: "Big.", ReadOnly: true, InputSchema: schema}
		if i%2 == 0 {
			def.Description, def.External = strings.Repeat("d", maxPayload-1<<10), true
		}
		ev, err := bus.NewEvent(bus.TypeRegister, "toolbus/worker/big", bus.Register{Worker: fmt.Sprintf("w%d", i), Tools: []bus.ToolDef{def}})
		must(t, err)
		return ev
	}
	const sent = 10
	var msgs []*nats.Msg
	for i := range sent {
		m, err := message(i).Msg(subject)
		must(t, err)
		if pad := maxPayload - 1<<10 - len(m.Data); pad > 0 { // white space after data: a valid registration
			m.Data = append(append(m.Data[:len(m.Data)-1:len(m.Data)-1], bytes.Repeat([]byte(" "), pad)...), '}')
		}
		msgs = append(msgs, m)
	}
	size := len(msgs[1].Data)
	kv, err := testkit.JetStream(t, d.conn("router").nc).KeyValue(testCtx(t), "toolbus_workers")
	must(t, err)
	writes := func() uint64 { // puts ever, whatever expired since
		st, err := kv.Status(testCtx(t))
		must(t, err)
		return st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	}
	before := writes()
	decoded, stored := 0, map[string]bool{}
	start := time.Now()
	for i, m := range msgs {
		r, err := w.nc.RequestMsgWithContext(testCtx(t), m) // testCtx: a decode under -race takes seconds
		must(t, err)
		re, err := bus.Decode(r)
		must(t, err)
		var (
			e   bus.Error
			ack bus.RegisterAck
		)
		switch {
		case re.Type == bus.TypeRegisterAck && re.DataAs(&ack) == nil && (i%2 == 1) == (len(ack.Accepted) == 1):
			decoded++
			if i%2 == 1 {
				stored[fmt.Sprintf("big.w%d", i)] = true
			}
		case re.Type == bus.TypeError && re.DataAs(&e) == nil && e.Code == bus.CodeLimitExceeded && strings.Contains(e.Message, "was not read"):
		default:
			t.Fatalf("registration %d: %s %s", i, re.Type, re.Data[:min(len(re.Data), 300)])
		}
	}
	elapsed := time.Since(start)
	// The burst (8 s of the rate) and what the rate gave back meanwhile.
	if most := int((8*rate + elapsed.Seconds()*rate) / float64(size)); decoded > most {
		t.Errorf("%d of %d registrations of %d bytes decoded in %v, want at most %d (the burst and the rate)", decoded, sent, size, elapsed, most)
	}
	t.Logf("%d of %d registrations of %d bytes decoded in %v", decoded, sent, size, elapsed)
	// What was refused changed nothing: the liveness writes (the bucket's
	// sequence, whatever expired since) are one for each registration read.
	deadline := time.Now().Add(bound)
	n := writes() - before
	for ; n < uint64(len(stored)) && time.Now().Before(deadline); n = writes() - before {
		time.Sleep(10 * time.Millisecond) // bounded polling: a beat counts before its write
	}
	if n != uint64(len(stored)) {
		t.Errorf("%d liveness writes, want %d, those of the registrations read (%v)", n, len(stored), stored)
	}

	// A fleet of another login (its own account) starting at once: taken.
	fleet := d.conn("worker")
	def := bus.ToolDef{Name: "fleet", Description: strings.Repeat("A tool of a fleet. ", 200), ReadOnly: true,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)}
	if ack, data := register(t, fleet, "f0", def); len(ack.Accepted) != 1 {
		t.Fatalf("the fleet's first worker: %s", data)
	}
	var wg sync.WaitGroup
	refused := make(chan string, 100)
	for i := range 100 {
		wg.Go(func() {
			ev, err := bus.NewEvent(bus.TypeRegister, "toolbus/worker/fleet", bus.Register{Worker: fmt.Sprintf("f%d", i+1), Tools: []bus.ToolDef{def}, InFlight: map[string][]string{"fleet": {}}})
			if err != nil {
				refused <- err.Error()
				return
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			m, err := bus.SendRequest(ctx, fleet.nc, bus.NewSubjects("").Workers.Register("fleet"), ev)
			if err != nil {
				refused <- err.Error()
				return
			}
			if !strings.Contains(string(m.Data), `"accepted":["fleet"]`) {
				refused <- string(m.Data)
			}
		})
	}
	wg.Wait()
	close(refused)
	for r := range refused {
		t.Errorf("a fleet's registration (4 KiB) not taken: %s", r)
	}
}
