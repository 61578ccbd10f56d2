package metrics

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttack41QueuedScrapesShareARender (redteam41): whoever reaches the
// port sends scrapes on many connections and never reads them. loose41's
// port rendered every scrape, one at a time, each waiting for its turn
// with no bound: a reader's scrape queued behind them waited for all their
// renders (each the whole registry: 8 MB here), and the port rendered for
// connections nobody reads. Now the scrapes that wait for a render of the
// same format share the next one: counted, not timed, the reader's scrape
// costs at most one render past the one under way whatever the queue (of
// each format the queue asks for: a few, whatever its headers say).
func TestAttack41QueuedScrapesShareARender(t *testing.T) {
	const queued = 16
	addr, big, stop := exposeBig(t)
	testkit.Stop(t, stop)
	big.hold = make(chan struct{})
	first := neverRead(t, addr)
	defer first.Close()
	testkit.Recv(t, big.collected, 30*time.Second, "the first scrape's collect")
	second := neverRead(t, addr) // its render waits for hold, holding the port's render
	defer second.Close()
	testkit.Recv(t, big.held, 30*time.Second, "the second scrape's collect")
	for range queued {
		c := neverRead(t, addr)
		defer c.Close()
	}
	waitServing(t, 1+queued) // the second and the queued, in the handler
	got := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
		req.Header.Set("Accept-Encoding", "identity") // as the queued ones': one format
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		got <- err
	}()
	waitServing(t, 2+queued)
	close(big.hold)
	if err := testkit.Recv(t, got, 2*time.Minute, "the reader's scrape"); err != nil {
		t.Fatalf("the reader's scrape: %v", err)
	}
	if n := big.calls.Load(); n > 3 {
		t.Errorf("the reader's scrape waited for %d renders (%d scrapes queued before it), want at most 3", n, queued)
	}
}

// waitServing waits until n scrapes are in the port's handler.
func waitServing(t *testing.T, n int) {
	t.Helper()
	testkit.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		if got := strings.Count(string(buf), "metrics.(*scrapes).serve("); got < n {
			return fmt.Errorf("%d of %d scrapes in the handler", got, n)
		}
		return nil
	})
}
