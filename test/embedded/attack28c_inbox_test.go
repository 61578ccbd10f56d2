package embedded

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
)

// TestAttackParkInputPastHalfPayload (session 28, third red team): the
// approver's inbox reads at most four left-out inputs a poll, so four
// parked inputs that never fit a page of parked.list even alone (the page
// keeps 4 KiB of the max payload) would spend every poll's reads. They
// cannot be parked: on a standalone server (max payload 1 MiB, a call
// input's bound too) a park record holds its input twice over, so an
// input past about half the max payload does not park, and every parked
// input fits a page alone (held). But such a call, under the input bound
// and accepted, ends in an internal error ("maximum payload exceeded")
// instead of a clear refusal: a known gap.
func TestAttackParkInputPastHalfPayload(t *testing.T) {
	knownBug(t, "a call input past half a 1 MiB max payload ends its park in an internal error, not a clear refusal")
	// A standalone nats-server's max payload (1 MiB; the embedded one's is
	// 8 MiB), the same as a call input's bound.
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	d := xtest.Run(t, xtest.Config{Server: srv, Routers: 1, Router: router.Config{Logger: testLogger()}, Heartbeat: testHeartbeat, Bound: readyBound})
	e := &env{t: t, d: d, srv: d.Server, routers: slices.Clone(d.Routers), rconns: slices.Clone(d.RouterConns)}
	e.nc = e.connect(t)
	e.client = client.New(e.nc, client.Config{Source: "test/agent"})
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true, Permission: bus.PermissionAsk})
	if mp := e.nc.MaxPayload(); mp != 1<<20 {
		t.Fatalf("max payload %d", mp)
	}
	e.registerDefs(t, bus.ToolDef{Name: "ask", External: true, Permission: bus.PermissionAsk})
	input, _ := json.Marshal(map[string]string{"x": strings.Repeat("x", 700<<10)})
	r := e.callParked(t, "hostile", "r1", bus.Call{ID: "c1", Name: "ask", Input: input})
	if len(r.Parked) == 1 {
		return
	}
	if len(r.Results) != 1 || r.Results[0].Error == nil || r.Results[0].Error.Code == bus.CodeInternal {
		t.Fatalf("a 700 KiB input neither parked nor refused clearly: %+v", r.Results)
	}
}
