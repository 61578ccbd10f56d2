package inbox

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

func openLoopback(t *testing.T) *Running {
	t.Helper()
	nc := testkit.Connect(t, testkit.RunServer(t))
	if _, err := store.Setup(t.Context(), testkit.JetStream(t, nc), bus.NewSubjects(""), store.Config{}); err != nil {
		t.Fatal(err)
	}
	in, err := Open(t.Context(), nc, "127.0.0.1:0", "", "", Config{Source: "test/inbox"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(t.Context()) })
	return in
}

// status sends method path to in with Host host and the token tok (none
// when ""), and returns the answer's status.
func status(t *testing.T, in *Running, method, path, host, tok string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+in.Addr+path, nil)
	req.Host = host
	if tok != "" {
		req.Header.Set(TokenHeader, tok)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s, Host %q: %v", method, path, host, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestAttackReboundHost (session 38, host38: fixed) is a page of the
// attacker's origin whose name is rebound to 127.0.0.1 (DNS rebinding):
// same-origin for the browser, it reaches the loopback inbox with its own
// name as Host and may guess the token as often as it likes. The inbox
// refuses every request whose Host is not a loopback name on a loopback
// connection (403) before it looks at the token: with the right token,
// and with a wrong one while a wrong token's turn (same) is held, which a
// look at the token would wait for. A request with no Host (HTTP/1.0) is
// refused alike; the loopback names still work.
func TestAttackReboundHost(t *testing.T) {
	in := openLoopback(t)
	_, port, _ := net.SplitHostPort(in.Addr)
	in.s.guess <- struct{}{} // a wrong token would wait for it
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example:" + port, "localhost.evil.example:" + port, "10.0.0.1:" + port} {
		for _, tok := range []string{in.Token(), "wrong-token-0123456789"} {
			for _, r := range [][2]string{{http.MethodGet, "/api/calls"}, {http.MethodGet, "/api/events"}, {http.MethodPost, "/api/act"}, {http.MethodGet, "/"}} {
				if got := status(t, in, r[0], r[1], host, tok); got != http.StatusForbidden {
					t.Errorf("%s %s, Host %q, token %q: %d, want 403", r[0], r[1], host, tok, got)
				}
			}
		}
	}
	for _, host := range []string{in.Addr, "localhost:" + port, "[::1]:" + port, "LOCALHOST:" + port} {
		if got := status(t, in, http.MethodGet, "/api/calls", host, in.Token()); got != http.StatusOK {
			t.Errorf("Host %q with the token: %d, want 200", host, got)
		}
	}
	<-in.s.guess
	c, err := net.Dial("tcp", in.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET /api/calls HTTP/1.0\r\n" + TokenHeader + ": " + in.Token() + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("no Host: %v %v, want 403", resp, err)
	}
}

// TestWrongTokensOneAtATime (session 38, host38): whoever reaches the
// inbox guesses its token as fast as it can ask (a short --inbox-token).
// A wrong token is answered only after its turn, guessEvery long, so
// however many connections guess, the answers take as long as one after
// the other; the right token never waits, even while a wrong one's turn
// is held.
func TestWrongTokensOneAtATime(t *testing.T) {
	in := openLoopback(t)
	const n = 5
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if got := status(t, in, http.MethodGet, "/api/calls", in.Addr, "wrong-token-0123456789"); got != http.StatusUnauthorized {
				t.Errorf("a wrong token: %d, want 401", got)
			}
		})
	}
	wg.Wait()
	if d := time.Since(start); d < n*guessEvery {
		t.Fatalf("%d wrong tokens in parallel answered in %v, want at least %v", n, d, n*guessEvery)
	}
	in.s.guess <- struct{}{}
	defer func() { <-in.s.guess }()
	if got := status(t, in, http.MethodGet, "/api/calls", in.Addr, in.Token()); got != http.StatusOK {
		t.Fatalf("the right token while a wrong one's turn is held: %d, want 200", got)
	}
}
