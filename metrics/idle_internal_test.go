package metrics

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttackIdleConnections (session 32, red team's gap): the metrics
// listener closes a connection idle between requests, so nobody who
// reaches its port holds its connections for good.
func TestAttackIdleConnections(t *testing.T) {
	defer func(d time.Duration) { idleTimeout = d }(idleTimeout)
	idleTimeout = 200 * time.Millisecond
	var out testkit.Buffer
	_, stop, err := Expose("127.0.0.1:0", "test", &out)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, stop)
	addr := regexp.MustCompile(`http://(\S+)/metrics`).FindStringSubmatch(out.String())[1]
	testkit.IdleClosed(t, addr, "GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusNotFound)
}
