package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// The worker SDK's cost per call against a raw NATS responder, in one
// benchmark run (issue 27): the same embedded nats-server, the same caller
// connection sending the same exec request (binary mode; the compact form
// to the worker, as a router sends it: docs/protocol.md 5.1) with nats.go's
// request, 16 callers on two cores; only what answers differs. BenchmarkRawResponder answers with the
// request's data on a plain subscription ("data", the cross-process
// bench's raw responder), or with the data and a binary-mode result
// header ("headers": the wire's own cost in nats.go); BenchmarkWorkerCall
// is a worker with a typed echo tool. responder-µs/op is the CPU of the
// responder's goroutines per call (its connection's, the worker's), by
// profiler labels; msgs/op the messages the server received per call;
// cpu-µs/op the whole process's (server and callers
// too); allocs/op the whole process's, so the differences between the
// benchmarks are the SDK's.
//
//	go test -run '^$' -bench 'WorkerCall|RawResponder' -benchmem -benchtime 40000x ./worker/

// benchCallers is 16, or TOOLBUS_BENCH_CALLERS (1 for the one-caller path).
var benchCallers = testkit.BenchCallers(16)

// benchExec runs the exec requests of callers callers, each with its own
// reply id (one call of each in flight at a time), to subject on nc, made
// by msgOf (bus.CompactMsg: as a router sends them to this worker;
// bus.BinaryMsg: as to a fleet with a worker of 1.15).
func benchExec(b *testing.B, s *server.Server, nc *nats.Conn, subject string, callers int, msgOf func(string, *bus.Event) *nats.Msg, check func(*nats.Msg) error) {
	b.Helper()
	req := bus.ExecRequest{Call: bus.Call{ID: "c1", Name: "echo", Input: json.RawMessage(`{"text":"hello"}`)},
		User: json.RawMessage("null"), Context: json.RawMessage("null"), Attempt: 1}
	msgs := make([]*nats.Msg, callers)
	for i := range msgs {
		e := bus.Head(bus.TypeExec, "toolbus/router/r1")
		e.Data = req.AppendJSON(nil)
		e.SessionID, e.ReplyID, e.ToolCallID = "bench-session-0001", fmt.Sprintf("M3CgXPmzZg1495hoVjoR%02d", i), "c1"
		e.ExpiryTime = bus.FormatExpiry(time.Now().Add(time.Hour))
		msgs[i] = msgOf(subject, &e)
	}
	testkit.Labelled("caller", func() {
		testkit.BenchCalls(b, s, callers, 100, []string{"responder", "caller"}, func(ctx context.Context, i int) error {
			ctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			resp, err := nc.RequestMsgWithContext(ctx, msgs[i])
			if err != nil {
				return err
			}
			return check(resp)
		})
	})
}

// BenchmarkRawResponder is the floor: a plain subscription that answers
// each exec request with its data ("data"), or with the data and a result
// header as the worker sends one ("headers").
func BenchmarkRawResponder(b *testing.B) {
	for _, headers := range []bool{false, true} {
		name := "data"
		if headers {
			name = "headers"
		}
		b.Run(name, func(b *testing.B) {
			s := testkit.RunServer(b)
			var caller, resp *nats.Conn
			testkit.Labelled("caller", func() { caller = testkit.Connect(b, s) })
			out := bus.Head(bus.TypeExecResult, "toolbus/worker/w1")
			out.SessionID, out.ReplyID, out.ToolCallID = "bench-session-0001", "M3CgXPmzZg1495hoVjoR00", "c1"
			out.Data = []byte(`{"state":"success","output":[{"type":"text","text":"hello"}]}`)
			result := bus.BinaryMsg("", &out)
			var err error
			testkit.Labelled("responder", func() {
				resp = testkit.Connect(b, s)
				_, err = resp.Subscribe("bench.raw.echo", func(m *nats.Msg) {
					if !headers {
						_ = resp.Publish(m.Reply, m.Data)
						return
					}
					_ = resp.PublishMsg(&nats.Msg{Subject: m.Reply, Header: result.Header, Data: result.Data})
				})
			})
			if err == nil {
				err = resp.Flush()
			}
			if err != nil {
				b.Fatal(err)
			}
			benchExec(b, s, caller, "bench.raw.echo", benchCallers, bus.BinaryMsg, func(*nats.Msg) error { return nil })
		})
	}
}

// BenchmarkWorkerCall is one read-only call served by the worker SDK: a
// typed echo tool, the request as a router sends it, the result checked.
func BenchmarkWorkerCall(b *testing.B) { benchWorker(b, benchCallers, 0) }

// BenchmarkWorkerSlowCall is the same tool taking 2 ms, at 64 callers and
// the default 64 slots: what the hand-off costs calls that block (each
// caller's latency is ns/op × 64; 2 ms / 64 = 31,250 ns/op at best).
func BenchmarkWorkerSlowCall(b *testing.B) { benchWorker(b, 64, 2*time.Millisecond) }

// benchWorker runs callers callers against a worker serving a typed echo
// tool that takes took.
func benchWorker(b *testing.B, callers int, took time.Duration) {
	s := testkit.RunServer(b)
	var caller *nats.Conn
	testkit.Labelled("caller", func() { caller = testkit.Connect(b, s) })
	rnc := testkit.Connect(b, s)
	reg := &registrar{leaving: make(chan struct{}), respond: acceptAll}
	subj := bus.NewSubjects("")
	if _, err := rnc.Subscribe(subj.All("register"), reg.handle(rnc)); err != nil {
		b.Fatal(err)
	}
	if err := rnc.Flush(); err != nil {
		b.Fatal(err)
	}
	type in struct {
		Text string `json:"text"`
	}
	var w *worker.Worker
	var err error
	testkit.Labelled("responder", func() {
		w, err = worker.New(testkit.Connect(b, s), worker.Config{ID: "w1"})
		if err == nil {
			err = worker.Register(w, bus.ToolDef{Name: "echo", Description: "Echo.", ReadOnly: true},
				func(_ context.Context, _ *worker.Call, in in) (string, error) {
					if took > 0 {
						time.Sleep(took)
					}
					return in.Text, nil
				})
		}
		if err == nil {
			err = w.Start(context.Background())
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Stop(context.Background()) })
	select {
	case <-w.Registered():
	case <-time.After(bound):
		b.Fatal("worker not registered")
	}
	benchExec(b, s, caller, subj.Workers.Exec("echo"), callers, bus.CompactMsg, func(m *nats.Msg) error {
		if m.Header.Get("ce-type") != bus.TypeExecResult {
			return fmt.Errorf("reply %q, %s", m.Header.Get("ce-type"), m.Data)
		}
		return nil
	})
}
