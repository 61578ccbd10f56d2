package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// startDurable starts a worker of the durable tool job on nc and returns
// its log.
func startDurable(t *testing.T, nc *nats.Conn) *testkit.Buffer {
	t.Helper()
	var logs testkit.Buffer
	w, err := worker.New(nc, worker.Config{ID: "w1", Heartbeat: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testkit.Stop(t, w.Drain) })
	def := bus.ToolDef{Name: "job", Description: "A durable job.", Durable: true}
	if err := worker.Register(w, def, func(context.Context, *worker.Call, struct{}) (string, error) { return "done", nil }); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return &logs
}

// loggedOnce waits until the log holds exactly one error line, with want
// (past jetstream's 5 s timeout of a refused lookup).
func loggedOnce(t *testing.T, logs *testkit.Buffer, want string) {
	t.Helper()
	line := `level=ERROR msg="worker: durable tool not served here" worker=w1 tool=job err=`
	testkit.CheckFor(t, 2*bound, 5*time.Millisecond, func() error {
		if n := strings.Count(logs.String(), line); n != 1 || !strings.Contains(logs.String(), want) {
			return fmt.Errorf("want one line %q with %q in:\n%s", line, want, logs.String())
		}
		return nil
	})
}

// TestDurableConsumerDenied: a worker whose user may not ask its work
// consumer's info (a durable tool its credentials do not cover) says so
// once, at the first lookup, instead of retrying it silently forever.
func TestDurableConsumerDenied(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "nats.conf")
	err := os.WriteFile(conf, []byte(`authorization { users = [
  {user: worker, password: w, permissions: {publish: {allow: [">"], deny: ["$JS.API.CONSUMER.INFO.>"]}}}
] }`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	s, err := embedded.Start(embedded.Config{ConfigFile: conf, StoreDir: t.TempDir(), MaxStore: embedded.Roomy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	logs := startDurable(t, testkit.Connect(t, s, nats.UserInfo("worker", "w")))
	loggedOnce(t, logs, `permission denied: nats: permissions violation: Permissions Violation for Publish to \"$JS.API.CONSUMER.INFO.`)
}

// TestDurableConsumerOfAnotherConfig: a consumer of the work consumer's
// name that filters another tool's calls is not used: the worker would
// take those calls and terminate them as not its tool's.
func TestDurableConsumerOfAnotherConfig(t *testing.T) {
	f := newFixture(t, true)
	js := testkit.JetStream(t, f.nc)
	ctx := t.Context()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: f.subj.Stream(bus.StreamWork),
		Subjects: []string{f.subj.Workers.Work("job"), f.subj.Workers.Work("other")}})
	var cons jetstream.Consumer
	if err == nil {
		cons, err = st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: f.subj.Workers.WorkConsumer("job"),
			FilterSubject: f.subj.Workers.Work("other"), AckPolicy: jetstream.AckExplicitPolicy})
	}
	if err == nil {
		_, err = js.Publish(ctx, f.subj.Workers.Work("other"), []byte("another tool's call"))
	}
	if err != nil {
		t.Fatal(err)
	}
	logs := startDurable(t, testkit.Connect(t, f.srv))
	loggedOnce(t, logs, `has another config: filter \"`+f.subj.Workers.Work("other")+`\"`)
	// The other tool's call is still there, never delivered (without the
	// check: delivered and terminated at once).
	if info, err := cons.Info(ctx); err != nil || info.NumPending != 1 || info.Delivered.Consumer != 0 {
		t.Fatalf("the other tool's call: %+v %v, want pending and never delivered", info, err)
	}
}

// TestDurableResultNamesCancel: a durable call (P_WORK, 5.8) that a cancel
// ends records its interrupted result on P.result.<tool> naming that
// cancel (1.30), whether the cancel came while it ran or before the worker
// took it (remembered), as a core call's result does.
func TestDurableResultNamesCancel(t *testing.T) {
	f := newFixture(t, true)
	js := testkit.JetStream(t, f.nc)
	ctx := t.Context()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: f.subj.Stream(bus.StreamWork), Subjects: []string{f.subj.Workers.Work("job")}})
	if err == nil {
		_, err = st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: f.subj.Workers.WorkConsumer("job"),
			FilterSubject: f.subj.Workers.Work("job"), AckPolicy: jetstream.AckExplicitPolicy})
	}
	if err != nil {
		t.Fatal(err)
	}
	// The routers' side of P.result: every result recorded, and kept here.
	results := make(chan bus.ExecResult, 4)
	recorded, _ := bus.NewEvent(bus.TypeExecRecorded, "toolbus/router/test", bus.ExecRecorded{Recorded: true})
	_, err = f.nc.Subscribe(f.subj.Workers.Result("job"), func(m *nats.Msg) {
		if e, err := bus.Decode(m); err == nil {
			var res bus.ExecResult
			if e.DataAs(&res) == nil {
				results <- res
			}
		}
		if r, err := recorded.Msg(m.Reply); err == nil {
			_ = f.nc.PublishMsg(r)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	f.startWorker(worker.Config{Heartbeat: 50 * time.Millisecond}, func(w *worker.Worker) {
		if err := w.Handle(bus.ToolDef{Name: "job", Description: "A durable job.", Durable: true, InputSchema: objectSchema}, g.handler); err != nil {
			t.Fatal(err)
		}
	})
	work := func(reply string) {
		t.Helper()
		m := eventMsg(t, f.subj.Workers.Work("job"), execEvent(t, "job", "c1", `{}`, inSession("s1", reply)))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	work("r1")
	testkit.Recv(t, g.entered, bound, "durable call running")
	remembered := f.cancel(t, "s1", "r2", "c1") // first: the worker reads cancels in order
	running := f.cancel(t, "s1", "r1", "c1")
	res := testkit.Recv(t, results, bound, "the running call's result")
	if res.State != bus.StateInterrupted || res.Cancel != running {
		t.Fatalf("running call: %s, want interrupted naming cancel %s", jsonOf(res), running)
	}
	// The cancel of r2 was handled before the one of r1, which ended that call.
	work("r2")
	res = testkit.Recv(t, results, bound, "the remembered call's result")
	if res.State != bus.StateInterrupted || res.Cancel != remembered {
		t.Fatalf("call cancelled before it came: %s, want interrupted naming cancel %s", jsonOf(res), remembered)
	}
	select {
	case c := <-g.entered:
		t.Fatalf("call %s started after its cancel", c)
	default:
	}
}
