package security

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/skills"
	"github.com/toolbus/toolbus/worker"
)

// TestIdentityFromCredentials: a secured router runs a bound session's
// batches and tools queries as the session's user, whatever they claim.
// session-s1 is bound to alice, session-s3 to bob, session-s2 to nobody.
// A claim that differs from the credentials' user is refused with denied
// and nothing runs; the same claim or none runs as the bound user; a claim
// in an unbound session is refused (no credential backs it). So alice's
// private skill is alice's: bob cannot list or load it by claiming
// "alice".
func TestIdentityFromCredentials(t *testing.T) {
	d := newDeployment(t)
	d.startWorker()
	users := d.whoami()
	ctx := testCtx(t)

	// Alice's private skill, pushed by the operator.
	dir := filepath.Join(t.TempDir(), "notes")
	must(t, os.MkdirAll(dir, 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: notes\ndescription: Alice's private notes.\n---\n# notes\nSecret steps.\n"), 0o600))
	ojs := testkit.JetStream(t, d.conn("operator").nc)
	st, err := ojs.ObjectStore(ctx, "toolbus_skills")
	must(t, err)
	if _, err := skills.Push(ctx, st, dir, "alice"); err != nil {
		t.Fatal(err)
	}

	alice, bob, nobody := d.conn("session-s1"), d.conn("session-s3"), d.conn("session-s2")
	testkit.CheckFor(t, bound, 50*time.Millisecond, func() error {
		tl, err := toolsAs(ctx, alice, "s1", nil)
		if err != nil {
			return err
		}
		if !strings.Contains(tl.SkillsPrompt, "Alice's private notes.") {
			return fmt.Errorf("alice's prompt %q", tl.SkillsPrompt)
		}
		return nil
	})
	// bob claims alice: refused, in a tools query and in a batch.
	if _, err := toolsAs(ctx, bob, "s3", json.RawMessage(`"alice"`)); !isDenied(err) {
		t.Fatalf("bob's tools query as alice: %v", err)
	}
	load := bus.Call{ID: "c1", Name: skills.LoaderName, Input: json.RawMessage(`{"skillId":"notes","path":"SKILL.md"}`)}
	_, err = bob.client().Call(ctx, "s3", bus.Batch{Calls: []bus.Call{load}, User: json.RawMessage(`"alice"`)}, client.WithReplyID("r1"))
	if !isDenied(err) || !strings.Contains(err.Error(), `bound to user "bob"`) {
		t.Fatalf("bob's batch as alice: %v", err)
	}
	// Claims of another shape are no way around it.
	for _, claim := range []string{`{"name":"alice"}`, `["alice"]`, `"bob "`} {
		if _, err := toolsAs(ctx, bob, "s3", json.RawMessage(claim)); !isDenied(err) {
			t.Fatalf("bob's tools query as %s: %v", claim, err)
		}
	}
	// bob as himself sees and loads nothing of alice's.
	tl, err := toolsAs(ctx, bob, "s3", nil)
	must(t, err)
	if strings.Contains(tl.SkillsPrompt, "Alice") {
		t.Fatalf("bob's prompt shows alice's skill: %q", tl.SkillsPrompt)
	}
	reply, err := bob.client().Call(ctx, "s3", bus.Batch{Calls: []bus.Call{load}}, client.WithReplyID("r2"))
	must(t, err)
	if b, _ := json.Marshal(reply.Results); strings.Contains(string(b), "Secret steps") {
		t.Fatalf("bob loaded alice's skill: %s", b)
	}
	// alice loads it, with or without naming herself.
	for i, user := range []json.RawMessage{nil, json.RawMessage(`"alice"`)} {
		reply, err := alice.client().Call(ctx, "s1", bus.Batch{Calls: []bus.Call{load}, User: user}, client.WithReplyID(fmt.Sprintf("a%d", i)))
		must(t, err)
		if b, _ := json.Marshal(reply.Results); !strings.Contains(string(b), "Secret steps") {
			t.Fatalf("alice did not load her skill: %s", b)
		}
	}
	// Tools see the bound user, whatever was claimed.
	who := bus.Call{ID: "w1", Name: "whoami"}
	if _, err := alice.client().Call(ctx, "s1", bus.Batch{Calls: []bus.Call{who}}, client.WithReplyID("w1")); err != nil {
		t.Fatal(err)
	}
	if got := users.get("s1", "w1"); got != `"alice"` {
		t.Fatalf("the worker saw user %s in s1, want \"alice\"", got)
	}
	// An unbound session runs as no user; a claim there is refused.
	if _, err := nobody.client().Call(ctx, "s2", bus.Batch{Calls: []bus.Call{who}, User: json.RawMessage(`"alice"`)}, client.WithReplyID("w2")); !isDenied(err) || !strings.Contains(err.Error(), "needs a credential") {
		t.Fatalf("a claim in an unbound session: %v", err)
	}
	if _, err := nobody.client().Call(ctx, "s2", bus.Batch{Calls: []bus.Call{who}}, client.WithReplyID("w3")); err != nil {
		t.Fatal(err)
	}
	if got := users.get("s2", "w3"); got != "" {
		t.Fatalf("the worker saw user %s in an unbound session, want none", got)
	}
	if got := users.get("s2", "w2"); got != "(not run)" {
		t.Fatalf("a refused batch ran: user %s", got)
	}
}

func isDenied(err error) bool {
	var be *bus.Error
	return errors.As(err, &be) && be.Code == bus.CodeDenied
}

// toolsAs sends a tools query for session as l, claiming user.
func toolsAs(ctx context.Context, l *login, session string, user json.RawMessage) (*bus.ToolsList, error) {
	e, err := bus.NewEvent(bus.TypeToolsQuery, "test/"+l.name, bus.ToolsQuery{User: user})
	if err != nil {
		return nil, err
	}
	e.SessionID = session
	m, err := bus.SendRequest(ctx, l.nc, bus.NewSubjects("").Tools(session), e)
	if err != nil {
		return nil, err
	}
	resp, err := bus.Decode(m)
	if err != nil {
		return nil, err
	}
	if resp.Type == bus.TypeError {
		var be bus.Error
		if err := resp.DataAs(&be); err != nil {
			return nil, err
		}
		return nil, &be
	}
	var tl bus.ToolsList
	return &tl, resp.DataAs(&tl)
}

// seenUsers records the user each whoami call saw, by session and call id.
type seenUsers struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *seenUsers) get(session, reply string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.m[session+"/"+reply]
	if !ok {
		return "(not run)"
	}
	return u
}

// whoami serves the read-only tool whoami as the worker user: it records
// the batch's user as the worker got it.
func (d *deployment) whoami() *seenUsers {
	d.t.Helper()
	seen := &seenUsers{m: map[string]string{}}
	w, err := worker.New(d.conn("worker").nc, worker.Config{Heartbeat: testHeartbeat})
	must(d.t, err)
	must(d.t, w.Handle(bus.ToolDef{Name: "whoami", Description: "Says who.", ReadOnly: true, InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, c *worker.Call) (*bus.ExecResult, error) {
			seen.mu.Lock()
			seen.m[c.SessionID+"/"+c.ReplyID] = string(c.User)
			seen.mu.Unlock()
			return &bus.ExecResult{Output: bus.Text("ok")}, nil
		}))
	must(d.t, w.Start(d.t.Context()))
	d.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Drain(ctx)
	})
	testkit.Recv(d.t, w.Registered(), bound, "whoami's registration")
	return seen
}
