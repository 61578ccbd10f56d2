package embedded

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/parked"
	"github.com/toolbus/toolbus/store"
)

// TestRouterHeldJudgesNoPeerGone: router A, held past a lease (SIGSTOP, as
// a starved process or a suspended VM; the server drops its connections,
// as it does a client that stopped answering pings), read none of its
// peers' renewals meanwhile. Its peer B renews all along, and ended a lone
// parked call (docs/protocol.md 6.1, 1.13) just before the hold, then
// published its call.result and batch.done. As A resumes, B is not gone: A
// publishes neither again in its four heartbeats back, past a lease
// (presence judges by the held clock, internal/held, and only up to when its
// restarting watch last delivered A's own renewal). Before session 30 A
// judged B gone on its first heartbeat back and published both: stored
// once, seen twice live, and logged as a router gone.
func TestRouterHeldJudgesNoPeerGone(t *testing.T) {
	const hb = time.Second
	bin := buildRouter(t)
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	js := testkit.JetStream(t, nc)
	// The buckets, so that A finds B's key as it starts: a router first
	// seen after an end counts as another process.
	if _, err := store.Setup(t.Context(), js, bus.NewSubjects("toolbus"), store.Config{Heartbeat: hb}); err != nil {
		t.Fatal(err)
	}
	_, routers, kv := buckets(t, nc)
	keepPresence(t, routers, "B", hb)
	a := startRouterArgs(t, bin, "--nats", s.ClientURL(), "--builtin=false", "--id", "A", "--heartbeat", hb.String())
	registerSignOff(t, nc)
	c := client.New(nc, client.Config{Source: "test/agent"})
	live := liveEvents(t, nc, "s1")

	const reply = "r1"
	r, err := c.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "sign_off"}}}, client.WithReplyID(reply))
	if err != nil || len(r.Parked) != 1 {
		t.Fatalf("call: %v %s", err, jsonOf(r))
	}
	// B's answer ends the call, and B completes the batch, as it would.
	res := endLone(t, kv, "s1", reply, "c1", "B")
	publishAs(t, js, "B", "s1", reply, "c1", bus.TypeCallResult, parked.ResultID("s1", reply, "c1"), res)
	publishAs(t, js, "B", "s1", reply, "", bus.TypeBatchDone, (&parked.Batch{Session: "s1", ReplyID: reply}).DoneID(), bus.BatchDone{Results: []bus.Result{res}})
	// parked.list answers once A's cache has the end: A noted it.
	var list struct {
		Parked []struct{ ID string } `json:"parked"`
	}
	if err := c.Admin(t.Context(), "parked.list", "s1", nil, &list); err != nil || len(list.Parked) != 0 {
		t.Fatalf("parked.list %+v %v", list, err)
	}

	renewals, err := routers.Watch(t.Context(), "A", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = renewals.Stop() }()
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	hold := time.NewTimer(3*hb + hb/2) // the fault itself: A is held this long
	// and the server drops A's connections, as it does a client that
	// stopped answering its pings: A's watches restart as it resumes.
	conns, err := s.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ci := range conns.Conns {
		if id, _ := nc.GetClientID(); ci.Cid != id {
			_ = s.DisconnectClientByID(ci.Cid)
		}
	}
	<-hold.C
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Four heartbeats of A's own after it resumed: past its first looks at
	// the note, and a lease for B's renewals to outlive it, however late
	// A's watch of P_routers, restarting, delivers them.
	resumed, n := time.Now(), 0
	for n < 4 {
		select {
		case e := <-renewals.Updates():
			if e != nil && e.Operation() == jetstream.KeyValuePut && e.Created().After(resumed) {
				n++
			}
		case <-time.After(bound):
			t.Fatalf("A renewed its key %d times in %v after it resumed", n, time.Since(resumed))
		}
	}
	for _, ev := range live.all() {
		if (ev.Type == bus.TypeCallResult || ev.Type == bus.TypeBatchDone) && ev.Source != "toolbus/router/B" {
			t.Fatalf("live %s from %s: a held router took its live peer for gone", ev.Type, ev.Source)
		}
	}
	if n, _ := countStored(t, nc, "s1", reply); fmt.Sprint(n) != fmt.Sprint(map[string]int{"call.result:c1": 1, "batch.done": 1}) {
		t.Fatalf("stored events of the batch %v", n)
	}
}
