package security

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/security"
)

// TestReservedReplyRefused (docs/security.md "Accounts"): the router may
// publish on _R_.>, the reply subjects the server gives the tool runners'
// requests into the main account. No client may choose one: a login of the
// main account that names _R_.… as its reply, to have the router answer
// into a runner's pending request, is refused by NATS and reaches no router.
func TestReservedReplyRefused(t *testing.T) {
	d := newDeployment(t)
	r := d.conn(security.RoleRouter)
	sent := map[string]string{"session-s1": "toolbus.call.s1", security.RoleAgent: "toolbus.tools.s9",
		security.RoleFacade: "toolbus.replay.s9", security.RoleOperator: "toolbus.admin.status"}
	got := make(chan *nats.Msg, 8)
	for _, subject := range append([]string{"toolbus.tools.s8"}, slices.Collect(maps.Values(sent))...) {
		_, err := r.nc.ChanSubscribe(subject, got)
		must(t, err)
	}
	must(t, r.nc.Flush())
	for user, subject := range sent {
		l := d.conn(user)
		must(t, l.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: "_R_.AbCdEf.GhIjKl", Data: []byte(`{}`)}))
		must(t, l.nc.Flush())
		deadline := time.After(bound)
		for !l.refusedReply("_R_.AbCdEf.GhIjKl") {
			select {
			case <-l.seen:
			case <-deadline:
				t.Fatalf("%s: no violation for the reply _R_.AbCdEf.GhIjKl: %v", user, l.errs)
			}
		}
	}
	// Every publish above was refused before delivery: this one comes first.
	must(t, d.conn(security.RoleAgent).nc.Publish("toolbus.tools.s8", []byte(`{}`)))
	select {
	case m := <-got:
		if m.Subject != "toolbus.tools.s8" {
			t.Fatalf("the router got %s (reply %s), want only the agent's tools.s8", m.Subject, m.Reply)
		}
	case <-time.After(bound):
		t.Fatal("the agent's tools.s8 did not reach the router")
	}
}

// refusedReply reports whether NATS refused a publish of l for its reply.
func (l *login) refusedReply(reply string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.errs {
		if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `Publish with Reply of "`+reply+`"`) {
			return true
		}
	}
	return false
}
