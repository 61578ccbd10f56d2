package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttackStopHeldByAScrape (session 39, red team c): the endpoint now
// serves through the drain and is shut down by the daemon's Stop, which
// waited for every request under way. A local program that sent a scrape
// announcing a body it never sends (Content-Length) kept its request under
// way for good: the server reads an unread body of a finished handler
// before the next request, with no read deadline. Stop then spent its
// whole deadline (DrainTimeout, after the drain's) and returned with the
// connection still open, and the traces' flush behind it got none. Stop
// now closes what its deadline cut off, and a request's body gets a read
// deadline.
func TestAttackStopHeldByAScrape(t *testing.T) {
	var out testkit.Buffer
	_, stop, err := Expose("127.0.0.1:0", "test", &out)
	if err != nil {
		t.Fatal(err)
	}
	addr := regexp.MustCompile(`http://(\S+)/metrics`).FindStringSubmatch(out.String())[1]
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Its handler blocks discarding the body before the answer's header;
	// another scrape, answered, is later than the server reading it.
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_ = stop(ctx)
	// The connection is closed by the time stop returns.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("the scrape's connection outlived stop: read %v", err)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}
