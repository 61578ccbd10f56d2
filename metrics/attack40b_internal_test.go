package metrics

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttack40bScrapesInFlight (session 40, red team on polish40's write
// deadline): whoever reaches the port opens scrapes it never reads, as many
// as it likes, each holding a handler and the metrics it gathered (8 MB
// here) for writeTimeout, then again: memory without bound for a few
// connections a second. At most maxScrapes run at once; another is refused
// at once (503), gathering nothing.
func TestAttack40bScrapesInFlight(t *testing.T) {
	addr, big, stop := exposeBig(t)
	testkit.Stop(t, stop)
	for i := range maxScrapes {
		c := neverRead(t, addr)
		defer c.Close()
		if i == 0 {
			testkit.Recv(t, big.collected, 10*time.Second, "the first scrape's collect")
		}
	}
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := big.calls.Load(); n < maxScrapes {
			return fmt.Errorf("%d of %d scrapes gathered", n, maxScrapes)
		}
		return nil
	})
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || big.calls.Load() != maxScrapes {
		t.Fatalf("a scrape past %d held ones: %s, %d gathers", maxScrapes, resp.Status, big.calls.Load())
	}
}
