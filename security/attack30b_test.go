package security_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/security"
)

// TestAttackPasswordVariableShared (session 30, second red team): without
// nkeys (`toolbus security config`) each login's password is read from
// TOOLBUS_<NAME>_PASSWORD, its name upper-cased with '-' as '_', so the
// logins worker-a-b, worker-a_b and worker-A-B read one variable: the
// operator could give them only one password, and a worker process that
// knows its own could log in as the other, the isolation a login per
// worker is for. Such users are refused before a configuration names them.
func TestAttackPasswordVariableShared(t *testing.T) {
	for _, spec := range []security.Spec{
		{Workers: []security.Handler{{Name: "a-b", Tools: []string{"x"}}, {Name: "a_b", Tools: []string{"y"}}}},
		{Workers: []security.Handler{{Name: "a", Tools: []string{"x"}}, {Name: "A", Tools: []string{"y"}}}},
		{Sessions: []string{"s-1", "s_1"}},
		{Handlers: []security.Handler{{Name: "h-1", Tools: []string{"x"}}, {Name: "H_1", Tools: []string{"y"}}}},
	} {
		users, err := security.Users(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := security.CheckPasswordNames(users); err == nil || !strings.Contains(err.Error(), "password") {
			t.Errorf("%+v: %v", spec, err)
		}
	}
	users, err := security.Users(security.Spec{Sessions: []string{"s1", "s2"}, Workers: []security.Handler{{Name: "a", Tools: []string{"x"}}, {Name: "b", Tools: []string{"x"}}},
		Handlers: []security.Handler{{Name: "a", Tools: []string{"y"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := security.CheckPasswordNames(users); err != nil {
		t.Fatal(err)
	}
	conf := security.ServerConfig("", users, nil)
	for _, u := range users {
		if n := strings.Count(conf, "$"+security.PasswordEnvName(u.Name)+","); n != 1 {
			t.Errorf("%s's variable named %d times", u.Name, n)
		}
	}
}

// TestAttackSpecLostKeepsWorkerLogins (session 30, second red team): a
// directory whose spec.json is gone is read back from users.json (LoadSpec's
// specOf, for directories older than spec.json). A login per worker has the
// worker role too, so each was taken for the shared worker: Refresh then
// confined the shared worker to the last one's tools and dropped every
// worker-<name> login from the configuration.
func TestAttackSpecLostKeepsWorkerLogins(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	spec := security.Spec{Workers: []security.Handler{{Name: "a", Tools: []string{"greet"}}, {Name: "b", Tools: []string{"fetch", "put"}}}}
	users, err := security.Generate(dir, "", spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, security.SpecFile)); err != nil {
		t.Fatal(err)
	}
	if changed, err := security.Refresh(dir); err != nil || changed {
		t.Fatalf("refresh: changed %v, %v", changed, err)
	}
	now, _ := os.ReadFile(filepath.Join(dir, security.UsersFile))
	if string(now) != security.JSON(users) {
		t.Fatalf("users.json rewritten:\n%s", now)
	}
}

// TestAttackRefreshWritesNoSymlink (session 30, second red team): a login
// added to spec.json gets its seed and .env file at the next Refresh (router
// --secure's start); where a dangling symlink stood in their place (a seed
// "moved" by a link to a mount not there, or planted), os.WriteFile
// followed it and created the router's secret outside the directory. The
// files are written by rename, as the configuration is: the link is
// replaced, its target never made.
func TestAttackRefreshWritesNoSymlink(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	if _, err := security.Generate(dir, "", security.Spec{}); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	for _, f := range []string{security.SeedFile(dir, "worker-a"), security.EnvFile(dir, "worker-a")} {
		if err := os.Symlink(filepath.Join(outside, filepath.Base(f)), f); err != nil {
			t.Fatal(err)
		}
	}
	sb, _ := json.Marshal(security.Spec{Workers: []security.Handler{{Name: "a", Tools: []string{"greet"}}}})
	if err := os.WriteFile(filepath.Join(dir, security.SpecFile), sb, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := security.Refresh(dir); err != nil || !changed {
		t.Fatalf("refresh: changed %v, %v", changed, err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Errorf("written through the links: %v", ents)
	}
	for _, f := range []string{security.SeedFile(dir, "worker-a"), security.EnvFile(dir, "worker-a")} {
		if fi, err := os.Lstat(f); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, fi, err)
		}
	}
	conf, _ := os.ReadFile(filepath.Join(dir, security.ServerConfigFile))
	if !slices.ContainsFunc(strings.Split(string(conf), "\n"), func(l string) bool { return strings.Contains(l, "# worker-a (role worker)") }) {
		t.Errorf("worker-a not in the configuration")
	}
}

// TestAttackWorkerLoginNames (session 30, second red team): a login per
// worker named to meet another login: worker-a beside worker-a-b, a
// handler a, a session worker-a, the shared worker. Every login keeps its
// own name, seed file, inbox and, for a tool runner, account; no login may
// read below another's inbox prefix (a name holds no '.', so
// _INBOX.worker-a.> never covers _INBOX.worker-a-b), and no two runners
// share an account.
func TestAttackWorkerLoginNames(t *testing.T) {
	users, err := security.Users(security.Spec{Sessions: []string{"worker-a", "a"}, Handlers: []security.Handler{{Name: "a", Tools: []string{"x"}}, {Name: "worker-a", Tools: []string{"x"}}},
		Workers: []security.Handler{{Name: "a", Tools: []string{"x"}}, {Name: "a-b", Tools: []string{"x"}}, {Name: "worker", Tools: []string{"x"}}, {Name: "bridge", Tools: []string{"x"}}}})
	if err != nil {
		t.Fatal(err)
	}
	names, inboxes, accounts := map[string]bool{}, map[string]string{}, map[string]string{}
	for _, u := range users {
		if names[u.Name] || inboxes[u.InboxPrefix] != "" {
			t.Errorf("%s: name or inbox %s taken", u.Name, u.InboxPrefix)
		}
		names[u.Name], inboxes[u.InboxPrefix] = true, u.Name
		if u.Role == security.RoleWorker || u.Role == security.RoleBridge {
			if other := accounts[u.Account]; other != "" {
				t.Errorf("%s and %s share account %s", u.Name, other, u.Account)
			}
			accounts[u.Account] = u.Name
		}
	}
	for _, u := range users {
		for _, sub := range u.Permissions.Subscribe {
			below, ok := strings.CutSuffix(sub, ".>")
			if !ok || !strings.HasPrefix(sub, "_INBOX.") {
				continue
			}
			for prefix, other := range inboxes {
				if other != u.Name && u.Role != security.RoleRouter && (prefix == below || strings.HasPrefix(prefix, below+".")) { // the router is trusted
					t.Errorf("%s may read %s's inbox %s (%s)", u.Name, other, prefix, sub)
				}
			}
		}
	}
}

// TestAttackConfKeysHostile (session 30, second red team): Refresh keeps
// a key nats-server.conf gives a user only when the user's seed is gone (a
// seed moved to the host that runs the role). A hand-edited or hostile
// configuration in the directory (a comment naming another user before a
// key, a second key line for a user, a key named for a user with a seed)
// never replaces a key whose seed is there: the configuration is rendered
// again with the seeds' keys.
func TestAttackConfKeysHostile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	users, err := security.Generate(dir, "", security.Spec{Workers: []security.Handler{{Name: "a", Tools: []string{"greet"}}}})
	if err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(dir, security.ServerConfigFile)
	conf, _ := os.ReadFile(confFile)
	const forged = "UAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	hostile := string(conf) + "# router (role router), inbox prefix _INBOX.router\n{nkey: \"" + forged + "\"\n# worker-a (role worker)\n  {nkey: \"" + forged + "\",\n"
	for _, u := range users {
		hostile = strings.Replace(hostile, "# "+u.Name+" (role", "# router (role", 1)
	}
	if err := os.WriteFile(confFile, []byte(hostile), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := security.Refresh(dir); err != nil || !changed {
		t.Fatalf("refresh: changed %v, %v", changed, err)
	}
	if now, _ := os.ReadFile(confFile); string(now) != string(conf) || strings.Contains(string(now), forged) {
		t.Fatalf("not the seeds' configuration:\n%s", now)
	}
}
