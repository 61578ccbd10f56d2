package client_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// BenchmarkCallPath is BenchmarkClientCall and BenchmarkRawRequester
// without the CPU profiler (whose signals valgrind does not survive), for
// callgrind: b.N calls from benchCallers goroutines. Counted at two b.N
// and differenced, the whole process's instructions per call of client
// less raw are the SDK's (docs/performance.md, session 41):
//
//	GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --dump-instr=no \
//	    ./client.test -test.run '^$' -test.bench '^BenchmarkCallPath/client$' -test.benchtime 5000x
func BenchmarkCallPath(b *testing.B) {
	b.Run("client", func(b *testing.B) {
		c := client.New(testkit.Connect(b, benchRouter(b)), client.Config{})
		b.Cleanup(func() { _ = c.Close(context.Background()) })
		callPath(b, func(ctx context.Context) error {
			reply, err := c.Call(ctx, benchSession, benchBatch)
			if err == nil && (len(reply.Results) != 1 || reply.Results[0].State != bus.StateSuccess) {
				err = fmt.Errorf("reply %+v", reply)
			}
			return err
		})
	})
	b.Run("raw", func(b *testing.B) {
		s := benchRouter(b)
		sent := sentBatch(b, s)
		nc := testkit.Connect(b, s)
		callPath(b, func(ctx context.Context) error {
			_, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: sent.Subject, Header: sent.Header, Data: sent.Data})
			return err
		})
	})
}

// sentBatch is the request a Client sends for benchBatch, caught on the
// call subject.
func sentBatch(b *testing.B, s *server.Server) *nats.Msg {
	cnc := testkit.Connect(b, s)
	sub, err := cnc.SubscribeSync(bus.NewSubjects("").Call(benchSession))
	if err == nil {
		err = cnc.Flush()
	}
	if err != nil {
		b.Fatal(err)
	}
	c := client.New(cnc, client.Config{})
	defer func() { _ = c.Close(context.Background()) }()
	if _, err := c.Call(b.Context(), benchSession, benchBatch); err != nil {
		b.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		b.Fatal(err)
	}
	_ = sub.Unsubscribe()
	return m
}

// callPath runs call b.N times from benchCallers goroutines, after 100.
func callPath(b *testing.B, call func(ctx context.Context) error) {
	for range 100 {
		if err := call(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var left atomic.Int64
	left.Store(int64(b.N))
	done := make(chan error, benchCallers)
	for range benchCallers {
		go func() {
			var err error
			for err == nil && left.Add(-1) >= 0 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err = call(ctx)
				cancel()
			}
			done <- err
		}()
	}
	for range benchCallers {
		if err := <-done; err != nil {
			b.Error(err)
		}
	}
}
