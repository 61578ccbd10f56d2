package inbox

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

// Names of the token's carriers: the cookie the page's first visit sets,
// and the header every POST must carry (a cross-site form or fetch cannot
// set it without a CORS preflight, which the inbox never grants).
const (
	CookieName  = "toolbus_inbox"
	TokenHeader = "X-Toolbus-Token"
)

// NewToken returns a random token of 32 hex digits (128 bits).
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b)
}

// Token returns the token to use: token when given, else the first line
// of the file tokenFile, else a new random one (generated reports so).
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
		return NewToken(), true, nil
	}
	if len(tok) < 16 {
		return "", false, errors.New("inbox: the token must have at least 16 characters")
	}
	return tok, false, nil
}

// CheckListen refuses to serve a non-loopback address with a token the
// user did not choose (generated): a page that answers confirmations on a
// public address is opened only on purpose.
func CheckListen(addr string, generated bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("inbox: listen address %q: %w", addr, err)
	}
	if Loopback(host) || !generated {
		return nil
	}
	return fmt.Errorf("inbox: %s is not a loopback address: give the page a token of your own (--inbox-token or --inbox-token-file) to serve it there", addr)
}

// Loopback reports whether host names only the local machine.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// gate is the token every request must carry.
type gate struct{ token string }

// guard checks the token and sets the headers every answer carries.
func (s *Server) guard(next http.Handler) http.Handler { return gate{token: s.cfg.Token}.wrap(next) }

// wrap is guard for the gate's token.
func (s gate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'none'")
		if tok := r.URL.Query().Get("token"); tok != "" && r.Method == http.MethodGet && r.URL.Path == "/" {
			if !s.same(tok) {
				http.Error(w, "401 unauthorized: the token is wrong; open the URL the inbox printed at start", http.StatusUnauthorized)
				return
			}
			// The token leaves the address bar (and the history) at once.
			http.SetCookie(w, &http.Cookie{Name: CookieName, Value: s.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		if !s.authorized(r) {
			http.Error(w, "401 unauthorized: open the URL the inbox printed at start (with ?token=...)", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost && !s.same(r.Header.Get(TokenHeader)) {
			http.Error(w, "403 forbidden: a POST needs the "+TokenHeader+" header", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authorized tells whether r carries the token: in the cookie, or (for a first
// visit from the printed URL) in the query.
func (s gate) authorized(r *http.Request) bool {
	if c, err := r.Cookie(CookieName); err == nil && s.same(c.Value) {
		return true
	}
	return s.same(r.Header.Get(TokenHeader))
}

func (s gate) same(v string) bool {
	return v != "" && subtle.ConstantTimeCompare([]byte(v), []byte(s.token)) == 1
}
