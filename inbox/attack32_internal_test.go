package inbox

import (
	"net/http"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttackIdleConnections (session 32, red team on the inbox's HTTP
// surface): anyone who reaches the inbox's port, with no token, sends one
// request (refused 401) and then keeps the connection open, idle, to hold
// a goroutine and a file descriptor of the inbox each, until it accepts no
// more. The server closes a connection idle between requests after
// idleTimeout (before: never, Go's default with no read timeout).
func TestAttackIdleConnections(t *testing.T) {
	defer func(d time.Duration) { idleTimeout = d }(idleTimeout)
	idleTimeout = 200 * time.Millisecond
	in := openLoopback(t)
	testkit.IdleClosed(t, in.Addr, "GET /api/calls HTTP/1.1\r\nHost: "+in.Addr+"\r\n\r\n", http.StatusUnauthorized)
}
