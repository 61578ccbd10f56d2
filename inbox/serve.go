package inbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/private"
	"github.com/toolbus/toolbus/skills"
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
		_ = s.Stop(ctx)
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

// Close stops serving and ends the watch: requests under way get until ctx
// ends, then open pages lose their connection. Safe to call twice.
func (r *Running) Close(ctx context.Context) {
	if err := r.srv.Shutdown(ctx); err != nil {
		_ = r.srv.Close()
	}
	<-r.done
	_ = r.s.Stop(ctx)
}

// Banner is the line a command prints at start: where to open the page.
func (r *Running) Banner() string {
	if r.Generated {
		return fmt.Sprintf("toolbus: approval inbox on http://%s — open %s (the token was generated now; --inbox-token or a token file keeps one)", r.Addr, r.URL)
	}
	return fmt.Sprintf("toolbus: approval inbox on http://%s — open http://%s/?token=<the token>", r.Addr, r.Addr)
}

// Token is the token the inbox requires.
func (r *Running) Token() string { return r.s.cfg.Token }

// TokenFile is the file SaveToken writes in its directory.
const TokenFile = "inbox.token"

// SaveToken writes token to dir/inbox.token, mode 0600, and returns the
// file's path: a router keeps a generated token there rather than in its
// log. dir must be private (0700 or tighter, owned by this process's
// user, not a symlink); "" means toolbus/ under the user's cache directory,
// made 0700. The file is replaced through a rename, so a link planted at
// its name is replaced, never followed.
func SaveToken(dir, token string) (string, error) {
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("inbox: no directory for the token: %w", err)
		}
		dir = filepath.Join(cache, "toolbus")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("inbox: %w", err)
		}
	}
	if err := skills.CheckPrivate(dir); err != nil {
		return "", fmt.Errorf("inbox: the token's directory: %w", err)
	}
	path := filepath.Join(dir, TokenFile)
	if _, err := private.WriteFile(path, strings.NewReader(token+"\n")); err != nil {
		return "", fmt.Errorf("inbox: %w", err)
	}
	return path, nil
}

// BannerSaved is Banner for a generated token kept in file: the line
// names the file, never the token.
func (r *Running) BannerSaved(file string) string {
	return fmt.Sprintf("toolbus: approval inbox on http://%s — open http://%s/?token=<the token in %s> (generated now; --inbox-token-file keeps one)", r.Addr, r.Addr, file)
}
