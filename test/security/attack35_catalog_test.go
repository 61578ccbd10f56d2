package security

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/security"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackWorkerFillsCatalogue (session 34's open row, closed in session
// 35 by protocol 1.25): the worker of every tool (the default worker login)
// registered 6,000 external tools, which never expire, and every session
// listed them all. Now the catalogue takes --max-tools names (40 here): the
// (bound+1)-th new name is rejected limit_exceeded and not stored, every
// earlier tool still beats and is listed, a session lists at most the
// bound, and a Go worker whose new tool is refused reports it (rejected,
// not served) and serves its others. Groups likewise (--max-groups, 3 here). Two routers judging apart in a burst
// stay within the stream's max_msgs (store.HardMsgs).
func TestAttackWorkerFillsCatalogue(t *testing.T) {
	const maxTools = 40
	d := newDeployment(t, func(c *router.Config) { c.Store.MaxTools, c.Store.MaxGroups = maxTools, 3 })
	d.startWorker() // greet, deploy, bigread, batchjob, pick
	w := d.conn(security.RoleWorker)
	var mine []string
	for i := 0; ; i++ {
		name := fmt.Sprintf("fill%d", i)
		ack, data := register(t, w, "attacker", ext(name))
		if len(ack.Accepted) == 1 {
			mine = append(mine, name)
			continue
		}
		if len(ack.Rejected) != 1 || !strings.HasPrefix(ack.Rejected[0].Reason, fmt.Sprintf("limit_exceeded: the catalogue holds %d tools, the routers' bound (router --max-tools)", maxTools)) {
			t.Fatalf("the new name %s: %s", name, data)
		}
		break
	}
	if len(mine) != maxTools-5 {
		t.Fatalf("%d new names taken beside the worker's 5, want %d", len(mine), maxTools-5)
	}
	for _, name := range mine { // held names: a beat, an update
		if ack, data := register(t, w, "attacker", ext(name)); len(ack.Accepted) != 1 {
			t.Fatalf("a beat of %s at the bound: %s", name, data)
		}
	}
	l, err := d.conn("session-s1").client().Tools(testCtx(t), "s1", "", nil)
	must(t, err)
	if len(l.Tools) > maxTools || !slices.ContainsFunc(l.Tools, func(x json.RawMessage) bool { return strings.Contains(string(x), `"name":"greet"`) }) {
		t.Fatalf("s1 lists %d tools (greet among them?), want at most %d", len(l.Tools), maxTools)
	}

	for i := range 4 { // groups alike, on their own subjects
		name := fmt.Sprintf("g%d", i)
		ev, err := bus.NewEvent(bus.TypeRegister, "toolbus/worker/attacker", bus.Register{Worker: "attacker", Groups: []bus.Group{{Name: name, Scope: bus.ScopeMeta}}})
		must(t, err)
		m, err := bus.SendRequest(testCtx(t), w.nc, bus.NewSubjects("").Workers.RegisterGroup(name), ev)
		must(t, err)
		re, err := bus.Decode(m)
		must(t, err)
		var ack bus.RegisterAck
		must(t, re.DataAs(&ack))
		if i < 3 && len(ack.Accepted) != 1 || i == 3 && (len(ack.Rejected) != 1 || !strings.HasPrefix(ack.Rejected[0].Reason, "limit_exceeded: the catalogue holds 3 groups")) {
			t.Fatalf("group %s, bound 3: %s", name, m.Data)
		}
	}

	// A Go worker of a held tool and a new one: the new one is rejected and
	// not served, greet is served.
	gw, err := worker.New(d.conn(security.RoleWorker).nc, worker.Config{Heartbeat: testHeartbeat})
	must(t, err)
	schema := json.RawMessage(`{"type":"object","properties":{"who":{"type":"string"}}}`)
	for _, def := range []bus.ToolDef{{Name: "greet", Description: "Greets.", ReadOnly: true, InputSchema: schema, ConcurrencySafe: true},
		{Name: "late", Description: "New.", InputSchema: schema}} {
		must(t, gw.Handle(def, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
			return &bus.ExecResult{Output: bus.Text("hello")}, nil
		}))
	}
	must(t, gw.Start(t.Context()))
	testkit.Stop(t, gw.Drain)
	testkit.Recv(t, gw.Registered(), bound, "the late worker's registration")
	if got := gw.Served(); !slices.Equal(got, []string{"greet"}) {
		t.Fatalf("the late worker serves %v, want greet alone", got)
	}
	rep, err := d.conn("session-s1").client().Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet", Input: client.Input(map[string]string{"who": "x"})}}})
	must(t, err)
	if rep.Results[0].State != bus.StateSuccess {
		t.Fatalf("greet at the bound: %+v", rep.Results[0])
	}

}

// TestAttackCatalogueBurstTwoRouters: two routers judge the bound apart,
// each from its own cache plus what it admitted, so in a burst from an
// empty catalogue each may take up to the bound before it sees the other's
// (measured: 200 new names at once through both, bound 40: 76 taken). The
// stream's max_msgs, bound + max(bound/4, 64), caps what they take together.
func TestAttackCatalogueBurstTwoRouters(t *testing.T) {
	const maxTools = 40
	d := newDeployment(t, func(c *router.Config) { c.Store.MaxTools = maxTools })
	ids, err := security.LoadBindings(filepath.Join(d.dir, security.UsersFile))
	must(t, err)
	r2, err := router.New(d.conn("router").nc, router.Config{Logger: slog.New(slog.DiscardHandler),
		Store: store.Config{Heartbeat: testHeartbeat, MaxTools: maxTools}, Identities: ids})
	must(t, err)
	must(t, r2.Start(t.Context()))
	testkit.Stop(t, r2.Stop)
	w := d.conn(security.RoleWorker)
	var wg sync.WaitGroup
	var mu sync.Mutex
	taken := 0
	for i := range 200 {
		wg.Go(func() {
			ack, _ := register(t, w, "attacker", ext(fmt.Sprintf("burst%d", i)))
			mu.Lock()
			taken += len(ack.Accepted)
			mu.Unlock()
		})
	}
	wg.Wait()
	kv, err := testkit.JetStream(t, d.conn("router").nc).KeyValue(testCtx(t), bus.NewSubjects("").Bucket(bus.BucketTools))
	must(t, err)
	keys, err := kv.ListKeys(testCtx(t))
	must(t, err)
	n := 0
	for range keys.Keys() {
		n++
	}
	t.Logf("a burst of 200 new names through two routers: %d taken, %d stored; bound %d, max_msgs %d", taken, n, maxTools, store.HardMsgs(maxTools))
	if n != taken || n < maxTools || n > int(store.HardMsgs(maxTools)) {
		t.Fatalf("%d taken, %d stored: want from the bound %d to max_msgs %d", taken, n, maxTools, store.HardMsgs(maxTools))
	}
}

// ext is an external tool's definition named name.
func ext(name string) bus.ToolDef {
	return bus.ToolDef{Name: name, Description: "Filler.", External: true, InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}
}
