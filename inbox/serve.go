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
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/loopback"
	"github.com/toolbus/toolbus/internal/private"
	"github.com/toolbus/toolbus/skills"
)

// Running is an inbox serving HTTP.
type Running struct {
	// URL is a one-time link to the page (?code=...): the page exchanges
	// its code for the token, after which the code is void, so the URL
	// the browser keeps in its history opens nothing (session 39).
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
	r := &Running{URL: "http://" + ln.Addr().String() + "/?code=" + s.codes.mint(time.Now()), Addr: ln.Addr().String(), Generated: generated,
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

// Banner is the line a command prints at start: where to open the page,
// with the one-time link and the token when the token was generated.
func (r *Running) Banner() string {
	if r.Generated {
		return fmt.Sprintf("toolbus: approval inbox on http://%s — open %s (a link for one visit within %v; for another tab, open http://%s/ and give it the token %s, generated now: --inbox-token-file keeps one)", r.Addr, r.URL, codeLife, r.Addr, r.s.cfg.Token)
	}
	// No link: a code is as good as the token while it lasts, and the
	// router's output goes to its log.
	return fmt.Sprintf("toolbus: approval inbox on http://%s — open http://%s/ and give it the token", r.Addr, r.Addr)
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
	return fmt.Sprintf("toolbus: approval inbox on http://%s — open http://%s/ and give it the token in %s (generated now; --inbox-token-file keeps one)", r.Addr, r.Addr, file)
}

// TokenHeader carries the token on every API request (cross-site, it needs
// a preflight the inbox never grants). No cookie carries it: cookies are not
// isolated by port, so one went to every server on the inbox's host
// (session 38, TestAttackTokenToAnotherPort).
const TokenHeader = "X-Toolbus-Token"

// CodeHeader carries a one-time login code to POST /api/login, which
// answers the token once for it.
const CodeHeader = "X-Toolbus-Code"

// codeLife is how long a login code can be exchanged, and maxCodes how
// many wait at most (minting past it drops the oldest).
const (
	codeLife = 15 * time.Minute
	maxCodes = 16
)

// codes are the one-time login codes (128 random bits each) not yet
// exchanged. A code is taken once: the URL that carried it, which the
// browser keeps in its history, then opens nothing (session 39,
// TestAttackTokenInHistory). The zero value is ready.
type codes struct {
	mu sync.Mutex
	m  map[string]time.Time // code -> when it expires
}

// mint makes a code valid until now+codeLife.
func (c *codes) mint(now time.Time) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	code := hex.EncodeToString(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]time.Time)
	}
	for len(c.m) >= maxCodes {
		oldest := ""
		for k, exp := range c.m {
			if oldest == "" || exp.Before(c.m[oldest]) {
				oldest = k
			}
		}
		delete(c.m, oldest)
	}
	c.m[code] = now.Add(codeLife)
	return code
}

// take reports whether code is a code not yet taken nor expired at now,
// and voids it: of two requests with one code, one wins.
func (c *codes) take(code string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, exp := range c.m {
		if subtle.ConstantTimeCompare([]byte(k), []byte(code)) == 1 {
			delete(c.m, k)
			return now.Before(exp)
		}
	}
	return false
}

// serveLogin answers the token for a one-time code (CodeHeader), once;
// a wrong, taken or expired code waits its turn as a wrong token does.
func (s *Server) serveLogin(w http.ResponseWriter, r *http.Request) {
	if !isJSON(r.Header.Get("Content-Type")) {
		http.Error(w, "415: send application/json", http.StatusUnsupportedMediaType)
		return
	}
	if !s.codes.take(r.Header.Get(CodeHeader), time.Now()) {
		wait(s.guess, r)
		http.Error(w, "401 unauthorized: this link was used already or is too old (a link opens one visit): open the page without it and give the token", http.StatusUnauthorized)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"token": s.cfg.Token})
}

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
// checks the token every API request but the login must carry in its header
// and sets the headers every answer carries. The page and its assets hold no
// data and no secret: the page keeps the token, exchanged for the one-time
// code of the URL it was opened with or given by the person, in its tab's
// sessionStorage (per origin, port included). A page URL with the token is
// refused: the browser's history would keep it.
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
		if page && r.URL.Query().Has("token") {
			http.Error(w, "400: the token does not go in the address (the browser's history keeps it): open the page without it and give the token there, or open the one-time link the inbox printed", http.StatusBadRequest)
			return
		}
		login := r.Method == http.MethodPost && r.URL.Path == "/api/login"
		if !page && !login && !s.same(r, r.Header.Get(TokenHeader)) {
			http.Error(w, "401 unauthorized: open the link the inbox printed at start, or give the page the token", http.StatusUnauthorized)
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
	wait(s.guess, r)
	return false
}

// wait holds the one guessing turn guess for guessEvery, or until r ends.
func wait(guess chan struct{}, r *http.Request) {
	select {
	case guess <- struct{}{}:
		select {
		case <-time.After(guessEvery):
		case <-r.Context().Done():
		}
		<-guess
	case <-r.Context().Done():
	}
}
