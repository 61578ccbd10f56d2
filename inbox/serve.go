package inbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
)

// Running is an inbox serving HTTP.
type Running struct {
	// URL is the page's address with the token, to open in a browser.
	URL string
	// Addr is the address it listens on.
	Addr string
	// Generated says the token was made at start (none was given).
	Generated bool

	srv  *http.Server
	s    *Server
	done chan struct{}
}

// Open starts an inbox on nc listening on addr: the token is token, the
// first line of tokenFile, or a random one; a non-loopback addr needs one
// of the first two (CheckListen). cfg.Token is set from them.
func Open(ctx context.Context, nc *nats.Conn, addr, token, tokenFile string, cfg Config) (*Running, error) {
	tok, generated, err := Token(token, tokenFile)
	if err != nil {
		return nil, err
	}
	if err := CheckListen(addr, generated); err != nil {
		return nil, err
	}
	cfg.Token = tok
	s, err := New(nc, cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("inbox: %w", err)
	}
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return base }}
	srv.RegisterOnShutdown(cancel) // ends the event streams
	r := &Running{URL: "http://" + ln.Addr().String() + "/?token=" + tok, Addr: ln.Addr().String(), Generated: generated,
		srv: srv, s: s, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Warn("inbox: serve", "err", err)
		}
	}()
	return r, nil
}

// Server returns the inbox being served.
func (r *Running) Server() *Server { return r.s }

// Close stops serving (open pages lose their connection) and ends the
// watch; safe to call twice.
func (r *Running) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.srv.Shutdown(ctx); err != nil {
		_ = r.srv.Close()
	}
	<-r.done
	r.s.Stop()
}

// Banner is the line a command prints at start: where to open the page.
func (r *Running) Banner() string {
	if r.Generated {
		return fmt.Sprintf("toolbus: approval inbox on http://%s — open %s (the token was generated now; --inbox-token or a token file keeps one)", r.Addr, r.URL)
	}
	return fmt.Sprintf("toolbus: approval inbox on http://%s — open http://%s/?token=<the token>", r.Addr, r.Addr)
}
