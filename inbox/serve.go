package inbox

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/loopback"
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

// idleTimeout closes a connection idle between requests: without it, one
// without the token held a goroutine and a descriptor for good (session 32).
var idleTimeout = 2 * time.Minute

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
	if cfg.Logger != nil {
		// Warned, not refused: a Kubernetes secret is mounted 0644 by default.
		if token != "" {
			cfg.Logger.Warn("inbox: a token given on the command line is in the process list, which every local user may read; give it in a file (--inbox-token-file)")
		} else if fi, err := os.Stat(tokenFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
			cfg.Logger.Warn("inbox: the token file may be read by other local users; make it readable by the router's user alone (chmod 600)", "file", tokenFile, "mode", fi.Mode().Perm().String())
		}
	}
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
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout,
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

// SaveToken writes token to dir/inbox.token (0600, by rename: a planted link
// is replaced, not followed) and returns its path. dir must be private; ""
// is toolbus/ under the user cache directory.
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

// TokenHeader carries the token on every API request (cross-site, it needs
// a preflight the inbox never grants). No cookie carries it: cookies are not
// isolated by port, so one went to every server on the inbox's host
// (session 38, TestAttackTokenToAnotherPort).
const TokenHeader = "X-Toolbus-Token"

// Token returns the token to use: token when given, else the first line
// of the file tokenFile, else a new random one of 32 hex digits, 128 bits
// (generated reports so).
func Token(token, tokenFile string) (tok string, generated bool, err error) {
	switch {
	case token != "" && tokenFile != "":
		return "", false, errors.New("inbox: give the token or a token file, not both")
	case token != "":
		tok = token
	case tokenFile != "":
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", false, fmt.Errorf("inbox: token file: %w", err)
		}
		tok, _, _ = strings.Cut(string(b), "\n")
		tok = strings.TrimSpace(tok)
	default:
		b := make([]byte, 16)
		_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
		return hex.EncodeToString(b), true, nil
	}
	if len(tok) < 16 {
		return "", false, errors.New("inbox: the token must have at least 16 characters")
	}
	return tok, false, nil
}

// CheckListen refuses a non-loopback address with a generated token: a
// public approval page is opened only on purpose.
func CheckListen(addr string, generated bool) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("inbox: listen address %q: %w", addr, err)
	}
	if loopback.Host(addr) || !generated {
		return nil
	}
	return fmt.Errorf("inbox: %s is not a loopback address: give the page a token of your own (--inbox-token or --inbox-token-file) to serve it there", addr)
}

// guard refuses a rebound Host (loopback.Rebound) before anything else,
// checks the token every API request must carry in its header and sets the
// headers every answer carries. The page and its assets hold no data and no
// secret: the page keeps the token of the URL it was opened with in its
// tab's sessionStorage (per origin, port included).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopback.Rebound(r) {
			http.Error(w, "403 forbidden: not a loopback Host (DNS rebinding)", http.StatusForbidden)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'none'")
		page := r.Method == http.MethodGet && (r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/assets/"))
		if tok := r.URL.Query().Get("token"); page && tok != "" && !s.same(r, tok) {
			http.Error(w, "401 unauthorized: the token is wrong; open the URL the inbox printed at start", http.StatusUnauthorized)
			return
		}
		if !page && !s.same(r, r.Header.Get(TokenHeader)) {
			http.Error(w, "401 unauthorized: open the URL the inbox printed at start (with ?token=...)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// guessEvery is the least time between two wrong tokens' answers.
var guessEvery = 100 * time.Millisecond

// same reports whether v is the token. A wrong one is answered only after
// holding s.guess for guessEvery, so an inbox answers at most ten wrong
// tokens a second, however many connections ask; the right token never
// waits. A request that ends meanwhile gets no answer.
func (s *Server) same(r *http.Request, v string) bool {
	if v == "" || subtle.ConstantTimeCompare([]byte(v), []byte(s.cfg.Token)) == 1 {
		return v != ""
	}
	select {
	case s.guess <- struct{}{}:
		select {
		case <-time.After(guessEvery):
		case <-r.Context().Done():
		}
		<-s.guess
	case <-r.Context().Done():
	}
	return false
}
