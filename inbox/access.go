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

// auth tells whether r carries the token: in the cookie, or (for a first
// visit from the printed URL) in the query.
func (s *Server) authorized(r *http.Request) bool {
	if c, err := r.Cookie(CookieName); err == nil && s.same(c.Value) {
		return true
	}
	return s.same(r.Header.Get(TokenHeader))
}

func (s *Server) same(v string) bool {
	return v != "" && subtle.ConstantTimeCompare([]byte(v), []byte(s.cfg.Token)) == 1
}
