package metrics

import (
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/internal/life"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestStopSlowReader (session 40, leftover of 39): a scrape whose client
// never reads holds its handler in a write of the answer's body, and
// another's handler is still gathering when stop's ctx ends. Stop ends by
// its ctx all the same, closes their connections, and waits for the
// handlers the closing ends (within the cleanup window): nothing of the
// endpoint runs once it has returned. Before, the second handler still ran.
func TestStopSlowReader(t *testing.T) {
	addr, big, stop := exposeBig(t)
	big.hold = make(chan struct{})
	c := neverRead(t, addr)
	defer c.Close()
	testkit.Recv(t, big.collected, 10*time.Second, "the first scrape's collect")
	c2 := neverRead(t, addr)
	defer c2.Close()
	testkit.Recv(t, big.held, 10*time.Second, "the second scrape's collect")
	const bound = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	context.AfterFunc(ctx, func() { close(big.hold) })
	start := time.Now()
	_ = stop(ctx)
	if took := time.Since(start); took > bound+life.DefaultCleanup {
		t.Fatalf("stop took %v past a ctx of %v and its cleanup window", took, bound)
	}
	if s := serving(true); s != "" {
		t.Fatalf("the endpoint still runs after stop:\n%s", s)
	}
}

// TestAttackScrapeNeverRead (session 40): whoever reaches the port held a
// handler, its connection and the metrics it gathered for good with a
// scrape whose answer it never reads (no write deadline), as many as it
// opened. The answer is now written within writeTimeout or its connection
// closed.
func TestAttackScrapeNeverRead(t *testing.T) {
	defer func(d time.Duration) { writeTimeout = d }(writeTimeout)
	writeTimeout = 300 * time.Millisecond
	addr, big, stop := exposeBig(t)
	testkit.Stop(t, stop)
	c := neverRead(t, addr)
	defer c.Close()
	testkit.Recv(t, big.collected, 10*time.Second, "the scrape's collect")
	testkit.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if s := serving(false); s != "" {
			return fmt.Errorf("the never-read scrape still served:\n%s", s)
		}
		return nil
	})
}

func exposeBig(t *testing.T) (string, *bigCollector, func(context.Context) error) {
	t.Helper()
	var out testkit.Buffer
	reg, stop, err := Expose("127.0.0.1:0", "test", &out)
	if err != nil {
		t.Fatal(err)
	}
	big := &bigCollector{desc: prometheus.NewDesc("test_big", "A large answer.", []string{"l"}, nil), collected: make(chan struct{}), held: make(chan struct{})}
	if err := reg.Register(big); err != nil {
		t.Fatal(err)
	}
	return regexp.MustCompile(`http://(\S+)/metrics`).FindStringSubmatch(out.String())[1], big, stop
}

// neverRead sends a scrape from a connection whose receive buffer is as
// small as the kernel allows and never read: the server's writes of a
// large answer fill it and its send buffer, then block.
func neverRead(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1) })
	}}
	c, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// bigCollector answers 8 MB; with hold set, its collects after the first
// wait for hold to close (held closed as the second waits).
type bigCollector struct {
	desc       *prometheus.Desc
	calls      atomic.Int32
	collected  chan struct{}
	hold, held chan struct{}
}

func (b *bigCollector) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }
func (b *bigCollector) Collect(ch chan<- prometheus.Metric) {
	if n := b.calls.Add(1); n > 1 && b.hold != nil {
		if n == 2 {
			close(b.held)
		}
		<-b.hold
	}
	pad := strings.Repeat("x", 4000)
	for i := range 2000 { // 8 MB, more than any socket buffers
		ch <- prometheus.MustNewConstMetric(b.desc, prometheus.GaugeValue, 1, pad+strconv.Itoa(i))
	}
	if b.calls.Load() == 1 {
		close(b.collected)
	}
}

// serving returns the stacks of the goroutines running a scrape (and, with
// accept, an HTTP server's accept loop); empty when none runs. (The
// goroutine of a scrape's connection ends on its own after the scrape.)
func serving(accept bool) string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "promhttp.") || accept && strings.Contains(g, "net/http.(*Server).Serve(") {
			found = append(found, g)
		}
	}
	return strings.Join(found, "\n\n")
}
