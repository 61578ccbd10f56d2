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
