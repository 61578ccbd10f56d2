package security_test

import (
	"slices"
	"testing"

	"github.com/toolbus/toolbus/security"
)

// TestWorkerLogins (session 30, red team): a login per worker is confined to
// its tools, takes their execs in their queue groups only, has an inbox of
// its own and is alone in its account; a name given twice, without tools or
// not a name is refused.
func TestWorkerLogins(t *testing.T) {
	users, err := security.Users(security.Spec{Workers: []security.Handler{{Name: "a", Tools: []string{"greet"}}}})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := security.Lookup(users, "worker-a")
	p := u.Permissions
	if u.Role != security.RoleWorker || u.Account != "toolbus-worker-a" || u.InboxPrefix != "_INBOX.worker-a" ||
		!slices.Contains(p.Subscribe, "toolbus.exec.greet toolbus-exec-greet") || !slices.Contains(p.Subscribe, "_INBOX.worker-a.>") ||
		slices.Contains(p.Subscribe, "toolbus.exec.greet") || slices.Contains(p.Subscribe, "_INBOX.worker.>") || !slices.Contains(p.Publish, "toolbus.register.greet") {
		t.Fatalf("worker-a: %+v", u)
	}
	for _, bad := range [][]security.Handler{{{Name: "a", Tools: []string{"x"}}, {Name: "a", Tools: []string{"y"}}}, {{Name: "a"}}, {{Name: "a.b", Tools: []string{"x"}}},
		{{Name: "a", Tools: []string{"x.y"}}}} {
		if _, err := security.Users(security.Spec{Workers: bad}); err == nil {
			t.Errorf("workers %+v taken", bad)
		}
	}
}
