package inbox

import (
	"net/http"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
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
	nc := testkit.Connect(t, testkit.RunServer(t))
	if _, err := store.Setup(t.Context(), testkit.JetStream(t, nc), bus.NewSubjects(""), store.Config{}); err != nil {
		t.Fatal(err)
	}
	in, err := Open(t.Context(), nc, "127.0.0.1:0", "", "", Config{Source: "test/inbox"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(t.Context()) })
	testkit.IdleClosed(t, in.Addr, "GET /api/calls HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusUnauthorized)
}
