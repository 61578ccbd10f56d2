package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

// testHeartbeat is 2 s, not 500 ms: a router declares a worker gone after
// three missed beats, and on a loaded 2-core machine a process-wide stall of
// the test binary (router, server and worker in one process, -race) beyond
// 1.5 s made every worker tool briefly "not live" (reproduced in
// mcp/facade's TestCalmBridgeRestart, 4 of 20 runs at load 20; 0 of 20 at 2 s).
// Nothing here waits for a beat: leaving is announced, not timed out.
const testHeartbeat = 2 * time.Second

func TestRunServesTools(t *testing.T) {
	x := xtest.Run(t, xtest.Config{Routers: 1, Heartbeat: testHeartbeat})
	s := x.Server
	cl := client.New(testkit.Connect(t, s), client.Config{})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testkit.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--nats", s.ClientURL(), "--id", "tw1", "--heartbeat", testHeartbeat.String(), "--max-concurrent", "4"}, &stdout, &stderr)
	}()
	if err := x.WaitLive(t.Context(), toolNames...); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if want := "toolworker: worker tw1 serving word_count, slow_echo, append_note, big_text on " + s.ClientURL(); !strings.Contains(stdout.String(), want) {
			return fmt.Errorf("stdout %q lacks %q", stdout.String(), want)
		}
		return nil
	})

	call := func(replyID, name string, input any) bus.Result {
		t.Helper()
		reply, err := cl.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: name, Input: client.Input(input)}}},
			client.WithReplyID(replyID))
		if err != nil {
			t.Fatal(err)
		}
		if len(reply.Results) != 1 || len(reply.Results[0].Output) == 0 {
			t.Fatalf("reply %+v", reply)
		}
		return reply.Results[0]
	}
	if res := call("r1", "word_count", map[string]string{"text": " one two\tthree\n"}); res.State != bus.StateSuccess || res.Output[0].Text != `{"words":3}` {
		t.Errorf("word_count: %+v", res)
	}
	if res := call("r-big", "big_text", map[string]int{"kib": 3}); res.State != bus.StateSuccess || len(res.Output[0].Text) != 3072 ||
		!strings.HasPrefix(res.Output[0].Text, "line 00000000 of big_text\n") {
		t.Errorf("big_text: %s %d bytes", res.State, len(res.Output[0].Text))
	}

	// append_note is not read-only: re-sending reply r2 does not run it twice.
	for range 2 {
		if res := call("r2", "append_note", map[string]string{"note": "a"}); res.Output[0].Text != `{"count":1}` {
			t.Errorf("append_note r2: %+v", res)
		}
	}
	if res := call("r3", "append_note", map[string]string{"note": "b"}); res.Output[0].Text != `{"count":2}` {
		t.Errorf("append_note r3: %+v", res)
	}

	events, err := cl.Watch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer events.Stop(t.Context())
	// 1 s: ten ticks of 100 ms, so a loaded machine that merges some
	// still reports at least two.
	if res := call("r4", "slow_echo", map[string]any{"text": "late", "ms": 1000}); res.Output[0].Text != "late" {
		t.Errorf("slow_echo: %+v", res)
	}
	var progress []int
	for len(progress) < 2 {
		select {
		case e := <-events.C:
			var p bus.Progress
			if e.Type == bus.TypeCallProgress && e.ReplyID == "r4" && e.DataAs(&p) == nil {
				progress = append(progress, p.Seq)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("progress events of slow_echo: %v", progress)
		}
	}
	if progress[0] != 1 || progress[1] != 2 {
		t.Errorf("progress seq %v", progress)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\nstderr: %s", err, stderr.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	// The worker said it was leaving: its tools are no longer live.
	if err := x.WaitGone(t.Context(), toolNames...); err != nil {
		t.Fatal(err)
	}
}

func TestSlowEchoStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := slowEcho(ctx, &worker.Call{}, SlowEchoIn{Text: "x", MS: 60000})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	out, err := slowEcho(t.Context(), &worker.Call{}, SlowEchoIn{Text: "now"})
	if err != nil || out != "now" {
		t.Fatalf("ms 0: %q %v", out, err)
	}
}

func TestNotes(t *testing.T) {
	var ns notes
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { ns.add("n") })
	}
	wg.Wait()
	if n := ns.add("last"); n != 11 {
		t.Fatalf("count %d", n)
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--max-concurrent", "0"}, "--max-concurrent"},
		{[]string{"--heartbeat", "0s"}, "--heartbeat"},
		{[]string{"--bogus"}, "flag provided but not defined"},
		{[]string{"--id", "a.b"}, `--id "a.b"`},
		{[]string{"--demo=false"}, "nothing to serve"},
		// No server: it waits (until the context ends here), then says so.
		{[]string{"--nats", "nats://127.0.0.1:1"}, "connect nats://127.0.0.1:1"},
	} {
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := run(ctx, tc.args, &stdout, &stderr)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
	var stdout bytes.Buffer
	if err := run(t.Context(), []string{"-h"}, &stdout, &bytes.Buffer{}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	if !strings.Contains(stdout.String(), "usage: toolworker") || !strings.Contains(stdout.String(), "-max-concurrent") {
		t.Errorf("-h output (on stdout):\n%s", stdout.String())
	}
}
