package metrics

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttack41HeldScrapesRefuseNone (session 41, the row redteam40b left):
// whoever reaches the port holds maxScrapes scrapes it never reads, and
// Prometheus's scrapes were answered 503 until the held ones' write
// deadline closed them. Now answers are rendered, one at a time, into
// buffers and written outside that bound; at most maxScrapes are held at
// once (their memory), one more closing the connection of the longest held.
// So with maxScrapes+1 held, the first is closed and a reader's scrape is
// served in full while the others are all still within their deadline
// (made a minute here: whatever the machine's load, only their expiry let
// a scrape through before).
func TestAttack41HeldScrapesRefuseNone(t *testing.T) {
	defer func(d time.Duration) { writeTimeout = d }(writeTimeout)
	writeTimeout = time.Minute
	addr, big, stop := exposeBig(t)
	testkit.Stop(t, stop)
	start := time.Now()
	var held []net.Conn
	for i := range maxScrapes + 1 {
		held = append(held, neverRead(t, addr))
		defer held[i].Close()
		// Each its own render (scrapes that wait for one share it: redteam41).
		testkit.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error {
			if n := big.calls.Load(); n < int32(i+1) {
				return fmt.Errorf("%d of %d scrapes gathered", n, i+1)
			}
			return nil
		})
	}
	ctx, cancel := context.WithDeadline(t.Context(), start.Add(writeTimeout))
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Accept-Encoding", "identity") // as the held ones'
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a scrape beside %d held ones: %v", maxScrapes+1, err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK || err != nil || n < 8e6 {
		t.Fatalf("a scrape beside %d held ones: %s, %d bytes read, %v", maxScrapes+1, resp.Status, n, err)
	}
	// The longest held was closed: its answer is no longer held.
	_ = held[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, held[0]); err != nil && !isReset(err) {
		t.Fatalf("the longest held scrape's connection is still open: %v", err)
	}
}
