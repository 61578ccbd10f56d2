package security_test

import (
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/security"
)

// TestServerConfigParses: the printed block with password variables, as
// `toolbus security config` prints it, is a valid nats-server
// configuration once the variables are set, and holds every user.
func TestServerConfigParses(t *testing.T) {
	users, err := security.Users(security.Spec{Prefix: "acme", Sessions: []string{"s1"}, Handlers: []security.Handler{{Name: "h", Tools: []string{"a", "b"}}},
		Workers: []security.Handler{{Name: "h", Tools: []string{"a"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		t.Setenv(security.PasswordEnvName(u.Name), "pw-"+u.Name)
	}
	conf := security.ServerConfig("acme", users, nil)
	path := filepath.Join(t.TempDir(), "s.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, conf)
	}
	if len(opts.Users) != len(users) {
		t.Fatalf("%d users in the server options, want %d", len(opts.Users), len(users))
	}
	for _, u := range opts.Users {
		if u.Password != "pw-"+u.Username {
			t.Fatalf("user %s: password %q not taken from the environment", u.Username, u.Password)
		}
		if u.Permissions == nil || u.Permissions.Publish == nil {
			t.Fatalf("user %s has no permissions", u.Username)
		}
		if want := map[string]string{"worker": "acme-worker", "bridge": "acme-bridge", "worker-h": "acme-worker-h"}[u.Username]; u.Account == nil || u.Account.Name != cmp.Or(want, "acme") {
			t.Fatalf("user %s in account %v, want %s", u.Username, u.Account, cmp.Or(want, "acme"))
		}
	}
	// A bridge's batch is answered when its calls end: past NATS' two minutes.
	i := slices.IndexFunc(opts.Accounts, func(a *server.Account) bool { return a.Name == "acme" })
	if d, err := opts.Accounts[i].ServiceExportResponseThreshold("acme.call.>"); err != nil || d != 24*time.Hour {
		t.Fatalf("acme.call.> may be answered for %v (%v), want 24h", d, err)
	}
	if !strings.Contains(conf, `"acme.exec.*"`) || strings.Contains(conf, "toolbus.") {
		t.Fatalf("the block does not follow the prefix:\n%s", conf)
	}
}

func TestSpecRefused(t *testing.T) {
	for name, spec := range map[string]security.Spec{
		"bad prefix":        {Prefix: "a.b"},
		"bad session":       {Sessions: []string{"a.b"}},
		"duplicate session": {Sessions: []string{"a", "a"}},
		"handler, no tools": {Handlers: []security.Handler{{Name: "h"}}},
		"bad handler tool":  {Handlers: []security.Handler{{Name: "h", Tools: []string{">"}}}},
		"duplicate handler": {Handlers: []security.Handler{{Name: "h", Tools: []string{"a"}}, {Name: "h", Tools: []string{"b"}}}},
		"bad worker tool":   {WorkerTools: []string{"*"}},
		"bad agent answer":  {AgentAnswers: []string{"a b"}},
		"bad approver tool": {ApproverTools: []string{""}},
		"bad handler name":  {Handlers: []security.Handler{{Name: "h.x", Tools: []string{"a"}}}},
	} {
		if _, err := security.Users(spec); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestNSC(t *testing.T) {
	users, err := security.Users(security.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	out := security.NSC("TOOLBUS", users)
	for _, want := range []string{"nsc add user --account TOOLBUS-worker --name worker", "--allow-pub-response=1", "nsc add user --account TOOLBUS --name router",
		"nsc add import --account TOOLBUS-bridge --token act.jwt --local-subject 'toolbus.events.>'", "--subject '$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_WORK.*' --service --response-type Stream", "'toolbus.call.*,toolbus.tools.*"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in\n%s", want, out)
		}
	}
}

// TestWorkerRegistersItsToolsOnly pins the worker user's registration
// subjects (docs/protocol.md 7.1, 1.12): its tools' P.register.<t> (every
// tool: P.register.*), the groups it may define (every group for a worker
// of every tool), and never the shared P.register of 1.11.
func TestWorkerRegistersItsToolsOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec security.Spec
		want []string
	}{
		{"every tool", security.Spec{}, []string{"toolbus.register.*", "toolbus.register.group.*"}},
		{"some tools", security.Spec{WorkerTools: []string{"greet", "deploy"}}, []string{"toolbus.register.greet", "toolbus.register.deploy"}},
		{"some tools and a group", security.Spec{WorkerTools: []string{"greet"}, WorkerGroups: []string{"ops"}}, []string{"toolbus.register.greet", "toolbus.register.group.ops"}},
		// The upgrade window: workers of 1.11 register on the shared subject.
		{"every tool and the shared subject", security.Spec{WorkerSharedRegister: true}, []string{"toolbus.register.*", "toolbus.register.group.*", "toolbus.register"}},
		{"some tools and the shared subject", security.Spec{WorkerTools: []string{"greet"}, WorkerSharedRegister: true}, []string{"toolbus.register.greet", "toolbus.register"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			users, err := security.Users(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			w, _ := security.Lookup(users, security.RoleWorker)
			var got []string
			for _, p := range w.Permissions.Publish {
				if p == "toolbus.register" || strings.HasPrefix(p, "toolbus.register.") {
					got = append(got, p)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("registration subjects %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := security.Users(security.Spec{WorkerGroups: []string{"ops"}}); err == nil {
		t.Fatal("worker groups without worker tools were taken")
	}
	if _, err := security.Users(security.Spec{WorkerTools: []string{"a"}, WorkerGroups: []string{"o.ps"}}); err == nil {
		t.Fatal("a bad worker group name was taken")
	}
}
