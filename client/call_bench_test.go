package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// The client SDK's cost per call against a raw NATS requester, in one
// benchmark run (issue 27): the same embedded nats-server and the same
// fake router, a plain subscription on the call subject answering every
// request with one prebuilt io.toolbus.call.reply (one success, as a
// router sends it); 16 callers on two cores. BenchmarkClientCall calls
// through client.Call; BenchmarkRawRequester sends the bytes a Client
// sends, with nats.go's request, and reads nothing of the reply.
// caller-µs/op is the CPU of the callers' goroutines, their
// connection's and its reply subscription's per call, by profiler labels; cpu-µs/op the whole
// process's (server and fake router too); allocs/op the whole process's,
// so the differences between the two are the SDK's.
//
//	go test -run '^$' -bench 'ClientCall|RawRequester' -benchmem -benchtime 40000x ./client/

// benchCallers is 16, or TOOLBUS_BENCH_CALLERS (1 for the one-caller path).
var benchCallers = testkit.BenchCallers(16)

const benchSession = "bench-session-0001"

// benchBatch is the batch of each call: one read-only echo.
var benchBatch = bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "echo", Input: []byte(`{"text":"hello"}`)}}}

// benchRouter starts a server and a fake router on it that answers every
// call with one success, and returns the server.
func benchRouter(b *testing.B) *server.Server {
	s := testkit.RunServer(b)
	var rnc *nats.Conn
	testkit.Labelled("router", func() { rnc = testkit.Connect(b, s) })
	var reply *nats.Msg
	e := bus.Head(bus.TypeCallReply, "toolbus/router/r1")
	e.SessionID, e.ReplyID = benchSession, "M3CgXPmzZg1495hoVjoRqG"
	e.Data = []byte(`{"results":[{"id":"c1","name":"echo","state":"success","output":[{"type":"text","text":"hello"}]}],"parked":[]}`)
	if err := bus.SendTrusted("", &e, "", func(m *nats.Msg) error {
		reply = &nats.Msg{Header: m.Header, Data: append([]byte(nil), m.Data...)}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	testkit.Labelled("router", func() {
		_, err := rnc.Subscribe(bus.NewSubjects("").Call(benchSession), func(m *nats.Msg) {
			_ = rnc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: reply.Header, Data: reply.Data})
		})
		if err == nil {
			err = rnc.Flush()
		}
		if err != nil {
			b.Fatal(err)
		}
	})
	return s
}

// BenchmarkClientCall is one call through client.Call, its reply checked.
func BenchmarkClientCall(b *testing.B) { benchClientCall(b, client.Config{}) }

// BenchmarkClientCallResendOff is BenchmarkClientCall never re-sending:
// the difference is what re-sending after silence costs a call.
func BenchmarkClientCallResendOff(b *testing.B) {
	benchClientCall(b, client.Config{Resend: client.Resend{Off: true}})
}

func benchClientCall(b *testing.B, cfg client.Config) {
	s := benchRouter(b)
	var c *client.Client
	testkit.Labelled("caller", func() {
		c = client.New(testkit.Connect(b, s), cfg)
		// The first call subscribes for the replies: its goroutine (if
		// any) is the caller's.
		if _, err := c.Call(b.Context(), benchSession, benchBatch); err != nil {
			b.Fatal(err)
		}
	})
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	testkit.BenchCalls(b, s, benchCallers, 100, []string{"caller", "router"}, func(ctx context.Context, _ int) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		reply, err := c.Call(ctx, benchSession, benchBatch)
		if err != nil {
			return err
		}
		if len(reply.Results) != 1 || reply.Results[0].State != bus.StateSuccess {
			return fmt.Errorf("reply %+v", reply)
		}
		return nil
	})
}

// BenchmarkRawRequester sends the request a Client sends (captured from
// one) with nats.go's request.
func BenchmarkRawRequester(b *testing.B) {
	s := benchRouter(b)
	sent := sentBatch(b, s)
	var nc *nats.Conn
	testkit.Labelled("caller", func() {
		nc = testkit.Connect(b, s)
		// The first request subscribes for the replies (nats.go's
		// response mux): its goroutine is the caller's.
		if _, err := nc.RequestMsg(&nats.Msg{Subject: sent.Subject, Header: sent.Header, Data: sent.Data}, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	})
	testkit.BenchCalls(b, s, benchCallers, 100, []string{"caller", "router"}, func(ctx context.Context, _ int) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: sent.Subject, Header: sent.Header, Data: sent.Data})
		return err
	})
}
