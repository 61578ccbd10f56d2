package embedded

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// routerProcess is cmd/router running as a separate process.
type routerProcess struct {
	cmd *exec.Cmd
}

func buildRouter(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "router")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/toolbus/toolbus/cmd/router").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startRouter starts the binary against url and waits for its "serving" line.
func startRouter(t *testing.T, bin, url, id string) *routerProcess {
	t.Helper()
	replicas := "1"
	if onCluster(t) {
		replicas = "3"
	}
	return startRouterArgs(t, bin, "--nats", url, "--replicas", replicas, "--builtin=false", "--id", id, "--heartbeat", testHeartbeat.String())
}

// startRouterArgs starts the binary with args and waits for its "serving"
// line.
func startRouterArgs(t *testing.T, bin string, args ...string) *routerProcess {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &routerProcess{cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			if !signalled && strings.Contains(sc.Text(), "serving") {
				close(ready)
				signalled = true
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("router process did not start")
	}
	return p
}

// killableDeployment starts nats-server in process (one node, or a cluster
// for TestOnCluster) and router "A" as a process (so it can be killed), and
// registers the external tool sign_off. url(i) is the URL a router started
// later should use: on a cluster, all nodes with node i first.
func killableDeployment(t *testing.T) (bin string, url func(int) string, nc *nats.Conn, c *client.Client, a *routerProcess) {
	t.Helper()
	bin = buildRouter(t)
	if onCluster(t) {
		cl := testkit.RunCluster(t)
		url = cl.URLs
		nc = testkit.ConnectURL(t, cl.URLs(2))
	} else {
		s := testkit.RunServer(t)
		url = func(int) string { return s.ClientURL() }
		nc = testkit.Connect(t, s)
	}
	c = client.New(nc, client.Config{Source: "test/agent"})
	a = startRouter(t, bin, url(0), "A")
	registerSignOff(t, nc)
	return bin, url, nc, c, a
}

// registerSignOff registers the external tool sign_off through a router
// that just said it serves.
func registerSignOff(t *testing.T, nc *nats.Conn) {
	t.Helper()
	reg, _ := bus.NewEvent(bus.TypeRegister, "test/registrar", bus.Register{Worker: "registrar", Tools: []bus.ToolDef{{
		Name: "sign_off", Description: "A person signs off.", External: true, ConcurrencySafe: true, Permission: bus.PermissionAllow,
		InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}}})
	m, _ := reg.Msg("toolbus.register")
	// On a cluster the new router's interest reaches nc's node a moment
	// after it says it serves: no responders until then.
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		_, err := nc.RequestMsg(m, bound)
		if err != nil && !errors.Is(err, nats.ErrNoResponders) {
			t.Fatal(err)
		}
		return err
	})
}

func TestParkedCallSurvivesRouterKill(t *testing.T) {
	bin, url, nc, c, a := killableDeployment(t)
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		list, err := c.Tools(t.Context(), "s1", "", nil)
		if err != nil {
			return err
		}
		if len(list.Tools) == 0 {
			return fmt.Errorf("sign_off not listed yet")
		}
		return nil
	})
	reply, err := c.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "sign_off"}}}, client.WithReplyID("r1"))
	if err != nil || len(reply.Parked) != 1 {
		t.Fatalf("call: %v %s", err, jsonOf(reply))
	}

	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL: no drain, no goodbye
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	startRouter(t, bin, url(1), "B")

	ev, err := c.Watch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	answerWhenServed(t, c, "sign_off", "s1", "r1", "c1", bus.Answer{State: "success", Output: bus.Text("signed")})
	done := nextEvent(t, ev, bus.TypeBatchDone)
	var bd bus.BatchDone
	if err := done.DataAs(&bd); err != nil || len(bd.Results) != 1 || textOf(bd.Results[0]) != "signed" {
		t.Fatalf("batch.done %s", done.Data)
	}
	// Exactly one result event for the call in the session's stream. The
	// watch sees batch.done as it is published; the stream leader may
	// store it a moment later, so wait for it there before counting.
	var types []string
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		types = types[:0]
		for _, e := range storedOf(t, nc, "s1") {
			types = append(types, e.Type)
		}
		if countOf(types, bus.TypeBatchDone) == 0 {
			return fmt.Errorf("batch.done not stored yet: %v", types)
		}
		return nil
	})
	if n := countOf(types, bus.TypeCallResult); n != 1 || countOf(types, bus.TypeBatchDone) != 1 {
		t.Fatalf("events in stream: %v", types)
	}
}

func countOf(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// A router killed while it still runs part of a parked batch: another
// router takes the batch over once the lease is stale, runs the calls that
// never reported, and the batch completes when the answer comes.
func TestBatchTakenOverFromKilledRouter(t *testing.T) {
	bin, url, _, c, a := killableDeployment(t)
	started := make(chan struct{}, 2)
	release := make(chan struct{})
	var runs atomic.Int32
	w, err := worker.New(testkit.ConnectURL(t, url(2)), worker.Config{Heartbeat: testHeartbeat})
	if err != nil {
		t.Fatal(err)
	}
	handle(t, w, bus.ToolDef{Name: "fetch", ReadOnly: true, ConcurrencySafe: true}, func(ctx context.Context, _ *worker.Call) (*bus.ExecResult, error) {
		if runs.Add(1) == 1 {
			started <- struct{}{}
			select { // the first run outlives its router; its reply goes nowhere
			case <-ctx.Done():
			case <-release:
			}
			return nil, errors.New("too late")
		}
		return textResult("fetched"), nil
	})
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(release); _ = w.Drain(context.Background()) })
	testkit.CheckFor(t, bound, 10*time.Millisecond, func() error {
		list, err := c.Tools(t.Context(), "s1", "", nil)
		if err != nil {
			return err
		}
		if len(list.Tools) < 2 {
			return fmt.Errorf("tools not listed yet")
		}
		return nil
	})
	ev, err := c.Watch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	if _, err := c.Publish("s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "sign_off"}, {ID: "c2", Name: "fetch"}}}, client.WithReplyID("r1")); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ev, bus.TypeCallParked)
	<-started
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	startRouter(t, bin, url(1), "B")
	res := nextEvent(t, ev, bus.TypeCallResult) // fetch, run again by B
	if res.ToolCallID != "c2" {
		t.Fatalf("first result is for %s", res.ToolCallID)
	}
	answerWhenServed(t, c, "sign_off", "s1", "r1", "c1", bus.Answer{State: "success", Output: bus.Text("signed")})
	done := nextEvent(t, ev, bus.TypeBatchDone)
	var bd bus.BatchDone
	if err := done.DataAs(&bd); err != nil || len(bd.Results) != 2 || textOf(bd.Results[0]) != "signed" || textOf(bd.Results[1]) != "fetched" {
		t.Fatalf("batch.done %s", done.Data)
	}
}

// answerWhenServed answers a parked call once a router serves the answer
// subject: a router just started subscribes, and on a cluster its interest
// reaches the agent's node a moment after it says it serves.
func answerWhenServed(t *testing.T, c *client.Client, tool, session, replyID, callID string, a bus.Answer) {
	t.Helper()
	testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		defer cancel()
		err := c.Parked().Answer(ctx, tool, session, replyID, callID, a)
		if err != nil && !errors.Is(err, nats.ErrNoResponders) {
			t.Fatal(err)
		}
		return err
	})
}
