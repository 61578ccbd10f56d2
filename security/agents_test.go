package security_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/security"
)

// TestAddAgent: a session agent added to a generated directory gets its
// own key, the other users keep theirs, the binding lands in users.json,
// the shared agent gets the session's deny entries, and the rewritten
// nats-server.conf parses with the deny lists in place. Adding it again
// with another user rebinds it and keeps its key.
func TestAddAgent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	if _, err := security.Generate(dir, "nats://127.0.0.1:4222", security.Spec{Prefix: "acme"}); err != nil {
		t.Fatal(err)
	}
	routerSeed, _ := os.ReadFile(security.SeedFile(dir, "router"))
	a, err := security.AddAgent(dir, "s1", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !a.Created || a.User.User != "alice" || a.User.Session != "s1" || a.Seed != security.SeedFile(dir, "session-s1") {
		t.Fatalf("AddAgent: %+v", a)
	}
	if again, _ := os.ReadFile(security.SeedFile(dir, "router")); string(again) != string(routerSeed) {
		t.Fatal("the router's seed changed")
	}
	env, err := os.ReadFile(a.Env)
	if err != nil || !strings.Contains(string(env), "NATS_URL=nats://127.0.0.1:4222\n") || !strings.Contains(string(env), "NATS_INBOX_PREFIX=_INBOX.session-s1\n") {
		t.Fatalf("session-s1.env %q %v", env, err)
	}
	b, err := security.LoadBindings(filepath.Join(dir, security.UsersFile))
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := b.UserOf("s1"); !ok || u != "alice" {
		t.Fatalf("binding of s1: %q %v", u, ok)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, security.ServerConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var shared *server.NkeyUser
	for _, u := range opts.Nkeys {
		if u.Permissions.Publish != nil && slices.Contains(u.Permissions.Publish.Deny, "acme.call.s1") { // the operator denies too (the routers' presence)
			shared = u
		}
	}
	if len(opts.Nkeys) != 8 || shared == nil || !slices.Contains(shared.Permissions.Publish.Deny, "acme.call.s1") ||
		!slices.Contains(shared.Permissions.Subscribe.Deny, "acme.events.s1") {
		t.Fatalf("%d nkey users; the shared agent's deny lists: %+v", len(opts.Nkeys), shared)
	}
	seed, _ := os.ReadFile(a.Seed)
	a, err = security.AddAgent(dir, "s1", "bob")
	if err != nil || a.Created || a.User.User != "bob" {
		t.Fatalf("rebind: %+v %v", a, err)
	}
	if again, _ := os.ReadFile(a.Seed); string(again) != string(seed) {
		t.Fatal("the session's seed changed on a rebind")
	}
	if _, err := security.AddAgent(dir, "bad.id", ""); err == nil {
		t.Fatal("a session id with a dot was accepted")
	}
	spec, err := security.LoadSpec(dir)
	if err != nil || spec.Prefix != "acme" || !slices.Equal(spec.Sessions, []string{"s1"}) || spec.Bind["s1"] != "bob" {
		t.Fatalf("spec %+v %v", spec, err)
	}
}

// TestLoadSpecWithoutSpecFile: a directory written before spec.json
// existed gives back its spec from users.json.
func TestLoadSpecWithoutSpecFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	want := security.Spec{Prefix: "acme", Sessions: []string{"s1"}, Bind: map[string]string{"s1": "alice"},
		Handlers: []security.Handler{{Name: "h", Tools: []string{"a"}}}, WorkerTools: []string{"w"}, WorkerGroups: []string{"ops"}, ApproverTools: []string{"p"}, AgentAnswers: []string{"q"}}
	if _, err := security.Generate(dir, "", want); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, security.SpecFile)); err != nil {
		t.Fatal(err)
	}
	got, err := security.LoadSpec(dir)
	if err != nil {
		t.Fatal(err)
	}
	gu, _ := security.Users(got)
	wu, _ := security.Users(want)
	if security.JSON(gu) != security.JSON(wu) {
		t.Fatalf("users from the rebuilt spec differ:\n%s\nwant\n%s", security.JSON(gu), security.JSON(wu))
	}
}

func TestParseBindings(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[string]string
		err  bool
	}{
		{`{"sessions": {"s1": "alice"}}`, map[string]string{"s1": "alice"}, false},
		{`[{"name": "session-s1", "role": "session", "session": "s1", "user": "bob"}, {"name": "agent", "role": "agent", "user": "x"}]`, map[string]string{"s1": "bob"}, false},
		{`{"sessions": {"s1": ""}}`, nil, true},
		{`{"session": {"s1": "a"}}`, nil, true},
		{`nonsense`, nil, true},
	} {
		got, _, err := security.ParseIdentities([]byte(c.in))
		if (err != nil) != c.err || !c.err && !mapsEqual(got, c.want) {
			t.Errorf("%s: %v %v", c.in, got, err)
		}
	}
}

// TestParseIdentities (1.13): which sessions have an agent login of their
// own, bound to a user or not: every session user of a users.json, and in
// an identities file the bound sessions and those "agents" lists. The
// router takes a session without one for the shared agent's.
func TestParseIdentities(t *testing.T) {
	for _, c := range []struct {
		in      string
		bind    map[string]string
		own     []string
		refused bool
	}{
		{`[{"name": "session-s1", "role": "session", "session": "s1", "user": "bob"}, {"name": "session-s2", "role": "session", "session": "s2"}, {"name": "agent", "role": "agent"}]`,
			map[string]string{"s1": "bob"}, []string{"s1", "s2"}, false},
		{`{"sessions": {"s1": "alice"}, "agents": ["s2"]}`, map[string]string{"s1": "alice"}, []string{"s1", "s2"}, false},
		{`{"sessions": {"s1": "alice"}}`, map[string]string{"s1": "alice"}, []string{"s1"}, false},
		{`{"agents": ["s 2"]}`, nil, nil, true},
	} {
		bind, own, err := security.ParseIdentities([]byte(c.in))
		if (err != nil) != c.refused {
			t.Fatalf("%s: %v", c.in, err)
		}
		if c.refused {
			continue
		}
		var got []string
		for s := range own {
			got = append(got, s)
		}
		slices.Sort(got)
		if !mapsEqual(bind, c.bind) || !slices.Equal(got, c.own) {
			t.Errorf("%s: bindings %v, own agents %v; want %v, %v", c.in, bind, got, c.bind, c.own)
		}
	}
	// A session agent added without a user (toolbus security agent
	// --session s2) is one of its own, bound to nobody.
	dir := filepath.Join(t.TempDir(), "secure")
	if _, err := security.Generate(dir, "", security.Spec{}); err != nil {
		t.Fatal(err)
	}
	if _, err := security.AddAgent(dir, "s2", ""); err != nil {
		t.Fatal(err)
	}
	b, err := security.LoadBindings(filepath.Join(dir, security.UsersFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, bound := b.UserOf("s2"); bound || !b.OwnAgent("s2") || b.OwnAgent("s3") {
		t.Fatalf("s2 bound %v, own agent %v; s3 own agent %v", bound, b.OwnAgent("s2"), b.OwnAgent("s3"))
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func FuzzParseBindings(f *testing.F) {
	f.Add([]byte(`{"sessions": {"s1": "alice"}}`))
	f.Add([]byte(`[{"role": "session", "session": "s1", "user": "bob"}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, _, err := security.ParseIdentities(b)
		if err != nil {
			return
		}
		for s, u := range m {
			if s == "" || u == "" {
				t.Fatalf("empty binding %q → %q from %q", s, u, b)
			}
		}
	})
}

// TestRefresh: a directory written by an older version (here: the agent
// may still pull any consumer of the events stream by name, issue 26) is
// rewritten with this version's permissions at the next start, every key
// kept; an up-to-date one, or one without users.json, is left alone, not a
// file written (an MCP-enabled one too, even without the facade's seed,
// whose key stays: TestSecureMCP's directories).
func TestRefresh(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	if _, err := security.Generate(dir, "", security.Spec{Sessions: []string{"s1"}}); err != nil {
		t.Fatal(err)
	}
	unchanged(t, dir, "fresh directory")
	if _, err := security.AddAgent(dir, "s2", "alice"); err != nil {
		t.Fatal(err)
	}
	unchanged(t, dir, "an agent added")
	kept, _ := os.ReadFile(filepath.Join(dir, security.ServerConfigFile))
	if err := os.Remove(security.SeedFile(dir, security.RoleFacade)); err != nil {
		t.Fatal(err)
	}
	unchanged(t, dir, "the facade's seed moved away")
	usersFile := filepath.Join(dir, security.UsersFile)
	b, _ := os.ReadFile(usersFile)
	old := strings.Replace(string(b), `"toolbus.replay.*"`, `"toolbus.replay.*", "$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_EVENTS.*"`, 1)
	if old == string(b) {
		t.Fatal("no agent replay permission to age")
	}
	if err := os.WriteFile(usersFile, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	seed, _ := os.ReadFile(security.SeedFile(dir, "agent"))
	if changed, err := security.Refresh(dir); err != nil || !changed {
		t.Fatalf("aged directory: %v %v", changed, err)
	}
	after, _ := os.ReadFile(usersFile)
	conf, _ := os.ReadFile(filepath.Join(dir, security.ServerConfigFile))
	if strings.Contains(string(after), "CONSUMER.MSG.NEXT.TOOLBUS_EVENTS") || strings.Contains(string(conf), "CONSUMER.MSG.NEXT.TOOLBUS_EVENTS") {
		t.Fatal("the old permission survived the refresh")
	}
	if now, _ := os.ReadFile(security.SeedFile(dir, "agent")); string(now) != string(seed) {
		t.Fatal("the agent's key changed")
	}
	// A seed moved away keeps its key when the configuration is rewritten.
	if now, _ := os.ReadFile(filepath.Join(dir, security.ServerConfigFile)); string(now) != string(kept) {
		t.Fatal("the facade's key was not kept")
	}
	if _, err := os.Stat(security.SeedFile(dir, security.RoleFacade)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the facade's seed came back: %v", err)
	}
	hand := t.TempDir()
	if err := os.WriteFile(filepath.Join(hand, security.ServerConfigFile), []byte("listen: 127.0.0.1:4222\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unchanged(t, hand, "hand-made configuration")
}

// unchanged checks that Refresh writes nothing in dir: every file the same
// (its inode, time and bytes: a rename makes a new one).
func unchanged(t *testing.T, dir, what string) {
	t.Helper()
	type file struct {
		info os.FileInfo
		data string
	}
	files := func() map[string]file {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]file{}
		for _, e := range entries {
			info, err := os.Stat(filepath.Join(dir, e.Name()))
			data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			m[e.Name()] = file{info, string(data)}
		}
		return m
	}
	before := files()
	if changed, err := security.Refresh(dir); err != nil || changed {
		t.Fatalf("%s: refreshed %v %v", what, changed, err)
	}
	after := files()
	for name, f := range before {
		g, ok := after[name]
		if !ok || !os.SameFile(f.info, g.info) || !f.info.ModTime().Equal(g.info.ModTime()) || f.data != g.data {
			t.Errorf("%s: %s written", what, name)
		}
	}
	if len(after) != len(before) {
		t.Errorf("%s: %d files, then %d", what, len(before), len(after))
	}
}
