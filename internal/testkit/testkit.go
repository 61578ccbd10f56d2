// Package testkit starts in-process nats-servers with JetStream for tests and
// offers bounded polling; xtest, apart because it imports the router and
// worker, starts whole deployments (docs/router.md "Layout").
package testkit

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolbus/toolbus/embedded"
)

// RunServer starts nats-server with JetStream on a random loopback port and a
// store in t.TempDir, and shuts it down when the test ends.
func RunServer(t testing.TB) *server.Server {
	t.Helper()
	s, err := embedded.Start(embedded.Config{MaxStore: embedded.Roomy, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect opens a client connection to s, closed when the test ends.
func Connect(t testing.TB, s *server.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// SetupWait bounds a setup step or a check's read on a loaded machine
// (a setup Put outlasted jetstream's 5 s default at load 17).
const SetupWait = 30 * time.Second

// JetStream returns a JetStream context on nc whose calls without a deadline
// wait SetupWait; a timeout under test sets its own deadline.
func JetStream(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(SetupWait))
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}

// CheckFor calls fn every poll until it returns nil or total elapses, then
// fails the test with fn's last error.
func CheckFor(t testing.TB, total, poll time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", total, err)
		}
		time.Sleep(poll)
	}
}

// Buffer is a bytes.Buffer safe for one writer and a polling reader: the
// stdout or stderr of a command that a test runs in the background.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// RunCluster starts a 3-node nats-server cluster with JetStream on loopback
// ports, stores in t.TempDir, and shuts it down when the test ends.
func RunCluster(t testing.TB) *embedded.Cluster {
	t.Helper()
	c, err := embedded.StartCluster(Within(t, embedded.ClusterReady), embedded.ClusterConfig{MaxStore: embedded.Roomy, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	Stop(t, c.Stop)
	return c
}

// StopWait bounds a stop run when a test ends.
const StopWait = 30 * time.Second

// Stop runs stop at the test's end under StopContext, logging its error.
func Stop(t testing.TB, stop func(ctx context.Context) error) {
	t.Helper()
	t.Cleanup(func() {
		if err := stop(StopContext(t)); err != nil {
			t.Logf("stop: %v", err)
		}
	})
}

// Within is t.Context() bounded by d, for a wait that takes a ctx.
func Within(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// StopContext is t's values without its cancellation, bounded by StopWait.
func StopContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), StopWait)
	t.Cleanup(cancel)
	return ctx
}

// ConnectURL opens a client connection to url (several, comma-separated,
// for a cluster) that keeps reconnecting, closed when the test ends.
func ConnectURL(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Recv returns the next value from ch, failing the test when none comes
// within total.
func Recv[T any](t testing.TB, ch <-chan T, total time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(total):
		t.Fatalf("timed out after %v waiting for %s", total, what)
		var zero T
		return zero
	}
}

// IdleClosed sends one HTTP/1.1 request (e.g. "GET / HTTP/1.1\r\nHost:
// x\r\n\r\n") on a new connection to addr, wants its answer's status, and
// then wants the server to close the connection, left idle, within 5 s: a
// server without an idle timeout lets anyone hold its connections for good.
func IdleClosed(t testing.TB, addr, request string, status int) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != status {
		t.Fatalf("%q: %v %v, want HTTP %d", request, res, err, status)
	}
	_ = res.Body.Close()
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := br.ReadByte(); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("an idle connection was kept %v (%v)", time.Since(start), err)
	}
}
