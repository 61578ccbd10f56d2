package security

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/security"
)

// TestAttackRunnerChainsAnswer (session 29, red team; docs/security.md
// "Accounts"): the server delivers the answer to a tool runner's request on
// the reply subject the runner named, in the runner's account, and passes an
// answer that arrives there on a subject the account imports as a service on
// through that import, whatever the login's permissions. While both runner
// accounts imported every service the main account exports, a worker (or a
// bridge) that named the shared P.register as the reply of a consumer info
// or a registration had JetStream's and a router's answers published on the
// main account's P.register, which neither may publish on. Now a runner's
// account imports as services only what its login may publish: no answer
// reaches a subject of the main account the login is denied.
func TestAttackRunnerChainsAnswer(t *testing.T) {
	d := newDeployment(t)
	s := bus.NewSubjects("")
	d.startWorker()
	spy := d.conn(security.RoleRouter)
	denied := map[string][]string{ // subjects of the main account each login may not publish on
		security.RoleWorker: {s.Workers.SharedRegister(), s.Handoffs.Ask("s1"), s.Call("s1"), s.Cancel("s1"), "_INBOX.operator.spy", "_INBOX.facade.spy"},
		security.RoleBridge: {s.Workers.SharedRegister(), "_INBOX.operator.spy", "_INBOX.facade.spy"},
	}
	got := make(chan *nats.Msg, 256)
	for _, subj := range denied[security.RoleWorker] {
		_, err := spy.nc.ChanSubscribe(subj, got)
		must(t, err)
	}
	must(t, spy.nc.Flush())
	// Requests the runners may send, answered by JetStream and a router.
	requests := []string{"$JS.API.CONSUMER.INFO." + s.Stream(bus.StreamWork) + "." + s.Workers.WorkConsumer("batchjob"), s.Workers.Register("greet")}
	for _, role := range []string{security.RoleWorker, security.RoleBridge} {
		l := d.conn(role)
		for _, reply := range denied[role] {
			for _, subj := range requests {
				must(t, l.nc.PublishMsg(&nats.Msg{Subject: subj, Reply: reply, Data: []byte(`{}`)}))
			}
		}
		// The same requests with the login's own inbox are answered: the
		// server has handled those above.
		for _, subj := range requests {
			if _, err := l.nc.Request(subj, []byte(`{}`), bound); err != nil {
				t.Fatalf("%s: %s: %v", role, subj, err)
			}
		}
		l.noViolations()
	}
	must(t, spy.nc.Flush())
	for {
		select {
		case m := <-got:
			t.Errorf("the main account's %s received an answer a runner asked for (%.100s)", m.Subject, m.Data)
		default:
			return
		}
	}
}

// TestAttackRunnerJetStreamBeyondConsumers (session 29, red team): the tool
// runners' accounts import the JetStream API of the work consumers only, and
// their logins may publish on nothing else of it: a worker or a bridge that
// asks for the events stream's info, a parked or ledger record by direct get,
// a stored message, a purge or a delete, or a consumer of its own, is refused
// by NATS before anything reaches JetStream.
func TestAttackRunnerJetStreamBeyondConsumers(t *testing.T) {
	d := newDeployment(t)
	s := bus.NewSubjects("")
	events, parked, ledger := s.Stream(bus.StreamEvents), "KV_"+s.Bucket(bus.BucketParked), "KV_"+s.Bucket(bus.BucketLedger)
	for _, role := range []string{security.RoleWorker, security.RoleBridge} {
		l := d.conn(role)
		for _, subj := range []string{"$JS.API.STREAM.INFO." + events, "$JS.API.DIRECT.GET." + parked + ".$KV." + s.Bucket(bus.BucketParked) + ".x",
			"$JS.API.DIRECT.GET." + ledger, "$JS.API.STREAM.MSG.GET." + events, "$JS.API.STREAM.PURGE." + events, "$JS.API.STREAM.DELETE." + events,
			"$JS.API.CONSUMER.CREATE." + s.Stream(bus.StreamWork), "$JS.API.CONSUMER.DELETE." + s.Stream(bus.StreamWork) + "." + s.Workers.WorkConsumer("batchjob"),
			"$JS.API.STREAM.LIST", "$KV." + s.Bucket(bus.BucketParked) + ".x"} {
			l.denyPublish(subj)
		}
	}
}
