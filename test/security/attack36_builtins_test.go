package security

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/security"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackFullCatalogueKeepsBuiltinsOut (queued36, session 35's open
// row): a worker filled the catalogue to --max-tools, and a router started
// (or restarted with new built-ins) had its built-in tools refused
// limit_exceeded like any worker's new name. The routers' built-ins
// (registry.Builtins, a fixed count with room of their own in the stream,
// store.BuiltinRoom) are exempt from the bound: every one of both name
// profiles is taken and served; a worker's new name is still refused.
func TestAttackFullCatalogueKeepsBuiltinsOut(t *testing.T) {
	d, w := fullCatalogue(t)
	startBuiltins(t, d)
	rep, err := d.conn("session-s1").client().Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: client.Input(map[string]string{"text": "x"})}}})
	must(t, err)
	if rep.Results[0].State != bus.StateSuccess {
		t.Fatalf("echo at the bound: %+v", rep.Results[0])
	}
	if ack, data := register(t, w, "attacker", ext("late")); len(ack.Rejected) != 1 || !strings.HasPrefix(ack.Rejected[0].Reason, "limit_exceeded") {
		t.Fatalf("a worker's new name past the bound: %s", data)
	}
}

// TestAttackWorkerTakesBuiltinNames (bounds37, session 36's open row): the
// exemption of TestAttackFullCatalogueKeepsBuiltinsOut went with the name,
// so a worker whose catalogue was full still registered echo, shell and the
// other 17 built-in names (the room store.BuiltinRoom keeps for the routers),
// and a router's built-ins then met the worker's definitions. Only the main
// account's registrations (the routers' logins) are exempt now: the worker's
// are refused limit_exceeded, the router's built-ins are still taken.
func TestAttackWorkerTakesBuiltinNames(t *testing.T) {
	d, w := fullCatalogue(t)
	for _, name := range registry.Builtins {
		if ack, data := register(t, w, "attacker", ext(name)); len(ack.Rejected) != 1 || !strings.HasPrefix(ack.Rejected[0].Reason, "limit_exceeded") {
			t.Fatalf("a worker's %s past the bound: %s", name, data)
		}
	}
	startBuiltins(t, d)
}

// fullCatalogue is a deployment of --max-tools 8 whose worker login has
// filled the catalogue, and that login.
func fullCatalogue(t *testing.T) (*deployment, *login) {
	t.Helper()
	if len(registry.Builtins) > store.BuiltinRoom {
		t.Fatalf("%d built-ins, room for %d", len(registry.Builtins), store.BuiltinRoom)
	}
	d := newDeployment(t, func(c *router.Config) { c.Store.MaxTools = 8 })
	d.startWorker() // greet, deploy, bigread, batchjob, pick
	w := d.conn(security.RoleWorker)
	for i := 0; ; i++ { // the attacker fills the catalogue
		if ack, _ := register(t, w, "attacker", ext(fmt.Sprintf("fill%d", i))); len(ack.Accepted) == 0 {
			return d, w
		}
	}
}

// startBuiltins serves both name profiles' built-ins and the tasks' tools
// as `router` does: logged in as the router, with its inbox prefix and
// "-builtin" (cmd/router), and checks every one is taken.
func startBuiltins(t *testing.T, d *deployment) {
	t.Helper()
	u, _ := security.Lookup(d.users, security.RoleRouter)
	cfg := natsconn.Config{URLs: d.srv.ClientURL(), NKey: security.SeedFile(d.dir, security.RoleRouter), InboxPrefix: u.InboxPrefix + "-builtin"}
	for _, names := range []string{builtin.NamesToolbus, builtin.NamesAgentScope} {
		nc, err := cfg.Connect("test-builtin", nats.MaxReconnects(-1))
		must(t, err)
		t.Cleanup(nc.Close)
		bw, err := worker.New(nc, worker.Config{Heartbeat: testHeartbeat})
		must(t, err)
		must(t, builtin.RegisterWith(t.Context(), bw, builtin.Config{WorkDir: t.TempDir(), Names: names, ShellAllow: []string{"echo"}, ShellAsRoot: true}))
		must(t, builtin.RegisterTasks(bw, nc, ""))
		must(t, bw.Start(t.Context()))
		testkit.Stop(t, bw.Drain)
		testkit.Recv(t, bw.Registered(), bound, "the built-ins' registration")
		served := bw.Served()
		if len(served) != 13 {
			t.Fatalf("%s: the built-in worker serves %v, want 13 tools", names, served)
		}
		for _, name := range served {
			if !slices.Contains(registry.Builtins, name) {
				t.Fatalf("%s: the built-in %s is not in registry.Builtins", names, name)
			}
		}
	}
}
