package facade

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/server"
	"sigs.k8s.io/yaml"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/loopback"
)

// Confirm is who may answer a call's confirmation through the host's
// elicitation.
type Confirm string

// Confirmation policies.
const (
	// ConfirmHostUser puts a confirm park of a call the host started to
	// the host's user (elicitation), who confirms only the calls of its
	// own user in sessions it may use: the desktop case.
	ConfirmHostUser Confirm = "host_user"
	// ConfirmApprovers never asks the host: the call parks for the
	// approvers (the host sees the parked notice and progress): the
	// shared deployment case.
	ConfirmApprovers Confirm = "approvers"
)

// ParseConfirm parses a policy name; "" is the zero Confirm.
func ParseConfirm(s string) (Confirm, error) {
	switch c := Confirm(s); c {
	case "", ConfirmHostUser, ConfirmApprovers:
		return c, nil
	}
	return "", fmt.Errorf("facade: confirm policy %q is neither %s nor %s", s, ConfirmHostUser, ConfirmApprovers)
}

// Identity is who an authenticated request acts for: the batch's and the
// listing's user, the bus sessions it may use, and its confirm policy.
type Identity struct {
	// Name names the credential in logs (a token file entry, the JWT's
	// subject); never the secret.
	Name string
	// User is the user of every call and listing; "" only in insecure
	// mode without a user header.
	User string
	// Sessions are the bus sessions the identity may use: exact ids and
	// "prefix*" patterns ("*" is every session).
	Sessions Sessions
	// Confirm is the identity's policy; "" means Config.Confirm.
	Confirm Confirm
}

// Sessions is a list of session ids and "prefix*" patterns ("*": every
// session).
type Sessions []string

// ParseSessions checks each pattern.
func ParseSessions(patterns []string) (Sessions, error) {
	for _, p := range patterns {
		if prefix, wild := strings.CutSuffix(p, "*"); !bus.ValidID(p) && !(wild && (prefix == "" || bus.ValidID(prefix))) {
			return nil, fmt.Errorf("facade: session pattern %q is neither a session id (^[A-Za-z0-9_-]{1,128}$) nor one's prefix followed by *", p)
		}
	}
	return Sessions(patterns), nil
}

// Allows reports whether id matches one of the patterns.
func (s Sessions) Allows(id string) bool {
	return slices.ContainsFunc(s, func(p string) bool {
		prefix, wild := strings.CutSuffix(p, "*")
		return p == id || wild && strings.HasPrefix(id, prefix)
	})
}

// Authenticator turns an HTTP request into the identity it acts for. It
// returns an error wrapping ErrNoCredentials when the request carries
// none, any other error when they are wrong (the request is answered 401
// either way, and nothing is published).
type Authenticator interface {
	Authenticate(r *http.Request) (Identity, error)
}

// ErrNoCredentials is wrapped by an Authenticator's error when the
// request carries no credentials at all.
var ErrNoCredentials = errors.New("no bearer token")

// bearer returns the request's bearer token: the Authorization header
// only (RFC 6750 2.1; a token in a query string is never read).
func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", ErrNoCredentials
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", errors.New("the Authorization header is not \"Bearer <token>\"")
	}
	return strings.TrimSpace(tok), nil
}

// metadataURL returns the RFC 9728 3.1 well-known URL of resource.
func metadataURL(resource string) (string, error) {
	u, err := url.Parse(resource)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", fmt.Errorf("facade: resource %q is not an absolute http(s) URL", resource)
	}
	if u.Fragment != "" || u.RawQuery != "" {
		return "", fmt.Errorf("facade: resource %q has a query or fragment (RFC 9728 2)", resource)
	}
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	return u.Scheme + "://" + u.Host + server.WellKnownProtectedResourcePath + path, nil
}

// gatekeeper is the HTTP front's authentication (docs/mcp.md
// "Authentication and identity").
type gatekeeper struct {
	auth       Authenticator // nil: insecure (Config.Insecure was checked)
	userHeader string
	log        *slog.Logger
}

// gate authenticates r and checks the identity against the bus session
// and the user header; false: it answered the refusal.
func (f *gatekeeper) gate(w http.ResponseWriter, r *http.Request, session string) (Identity, bool) {
	claimed := r.Header.Get(f.userHeader)
	if f.auth == nil { // insecure: Config.Insecure was checked in New
		return Identity{Name: "insecure", User: claimed, Sessions: Sessions{"*"}}, true
	}
	id, err := f.auth.Authenticate(r)
	if err != nil {
		f.unauthorized(w, err)
		return Identity{}, false
	}
	if !id.Sessions.Allows(session) {
		f.log.Info("facade: session refused", "identity", id.Name, "session", session)
		f.forbidden(w, fmt.Sprintf("the credential %q may not use session %q", id.Name, session),
			`error="insufficient_scope", scope="toolbus:session:`+session+`"`)
		return Identity{}, false
	}
	if claimed != "" && claimed != id.User {
		f.log.Info("facade: claimed user refused", "identity", id.Name, "claimed", claimed)
		f.forbidden(w, fmt.Sprintf("the %s header %q is not the credential's user", f.userHeader, claimed), "")
		return Identity{}, false
	}
	return id, true
}

// challenge is the WWW-Authenticate value with params (RFC 6750 3, RFC
// 9728 5.1).
func (f *gatekeeper) challenge(params string) string {
	var parts []string
	if params != "" {
		parts = append(parts, params)
	}
	if o, ok := f.auth.(*OAuth); ok {
		parts = append(parts, `resource_metadata="`+o.metaURL+`"`)
	}
	if len(parts) == 0 {
		return `Bearer realm="toolbus"`
	}
	return "Bearer " + strings.Join(parts, ", ")
}

func (f *gatekeeper) unauthorized(w http.ResponseWriter, err error) {
	params := ""
	if !errors.Is(err, ErrNoCredentials) {
		// RFC 6750 3: a token was given and is not good; the description
		// is ours (no claim values of the token).
		params = `error="invalid_token", error_description="` + quoteSafe(err.Error()) + `"`
	}
	w.Header().Set("WWW-Authenticate", f.challenge(params))
	writeHTTPError(w, http.StatusUnauthorized, "unauthorized: "+err.Error())
}

func (f *gatekeeper) forbidden(w http.ResponseWriter, msg, params string) {
	if params != "" {
		w.Header().Set("WWW-Authenticate", f.challenge(params))
	}
	writeHTTPError(w, http.StatusForbidden, "forbidden: "+msg)
}

// writeHTTPError answers a JSON-RPC error (id null) with status, so that
// an MCP client shows the reason.
func writeHTTPError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": -32001, "message": msg}})
}

// quoteSafe keeps s within an RFC 6750 quoted string (%x20-21 / %x23-5B /
// %x5D-7E).
func quoteSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			b[i] = '\''
		}
	}
	return string(b)
}

// serveMetadata answers the RFC 9728 metadata at the well-known path and
// every path below it.
func (f *gatekeeper) serveMetadata(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	if p != server.WellKnownProtectedResourcePath && !strings.HasPrefix(p, server.WellKnownProtectedResourcePath+"/") {
		return false
	}
	o, ok := f.auth.(*OAuth)
	if !ok {
		http.NotFound(w, r)
		return true
	}
	server.NewProtectedResourceMetadataHandler(o.Metadata()).ServeHTTP(w, r)
	return true
}

// CheckListen checks an HTTP facade's address: without an Authenticator it
// serves only with insecure set, on a loopback address.
func CheckListen(addr string, authenticated, insecure bool) error {
	if authenticated {
		if insecure {
			return errors.New("facade: --mcp-insecure goes with no authentication (--mcp-tokens, --mcp-oauth-*)")
		}
		return nil
	}
	if !insecure {
		return errors.New("facade: the MCP facade requires authentication: --mcp-tokens FILE or --mcp-oauth-issuer/--mcp-oauth-audience/--mcp-oauth-jwks (or --mcp-insecure on a loopback address, for a desktop)")
	}
	if !Loopback(addr) {
		return fmt.Errorf("facade: --mcp-insecure serves only a loopback address (127.0.0.1:port, [::1]:port, localhost:port), not %q: anyone who reaches it acts with the facade's permissions", addr)
	}
	return nil
}

// Loopback reports whether host:port addr is a loopback address (or
// localhost).
func Loopback(addr string) bool {
	_, _, err := net.SplitHostPort(addr)
	return err == nil && loopback.Host(addr)
}

// refuseRebound and refuseForm answer, and report whether they did, a
// request a web page may have sent for a browser (docs/mcp.md "Browsers are
// refused"): refuseRebound a loopback connection whose Host is not a loopback
// name (DNS rebinding), refuseForm an authenticated POST whose body is not
// application/json. The facade serves some requests before mcp-go sees them.
func refuseRebound(w http.ResponseWriter, r *http.Request) bool {
	if loopback.Rebound(r) {
		writeHTTPError(w, http.StatusForbidden, fmt.Sprintf("forbidden: the Host %q is not a loopback name on a loopback address (DNS rebinding)", r.Host))
		return true
	}
	return false
}

func refuseForm(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeHTTPError(w, http.StatusUnsupportedMediaType, "the body of a POST must be application/json")
		return true
	}
	return false
}

// Tokens authenticates the bearer tokens of a token file (YAML or JSON,
// unknown members refused; format in docs/mcp.md "Token file"). Only the
// tokens' SHA-256 are kept in memory. It is safe for concurrent use; Reload
// reads the file again.
type Tokens struct {
	path string

	mu      sync.RWMutex
	entries []tokenEntry
}

// tokenEntry is a token's SHA-256 and the identity it authenticates.
type tokenEntry struct {
	hash [sha256.Size]byte
	Identity
}

type tokenFile struct {
	Tokens []struct {
		Name     string   `json:"name"`
		Token    string   `json:"token"`
		User     string   `json:"user"`
		Sessions []string `json:"sessions"`
		Confirm  string   `json:"confirm"`
	} `json:"tokens"`
}

// LoadTokens reads the token file at path.
func LoadTokens(path string) (*Tokens, error) {
	t := &Tokens{path: path}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload reads the file again; on an error the entries already loaded
// stay.
func (t *Tokens) Reload() error {
	b, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("facade: tokens: %w", err)
	}
	entries, err := parseTokens(t.path, b)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.entries = entries
	t.mu.Unlock()
	return nil
}

// minTokenBytes is the least length of a plaintext token.
const minTokenBytes = 16

func parseTokens(name string, b []byte) ([]tokenEntry, error) {
	var f tokenFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("facade: tokens %s: %w", name, err)
	}
	if len(f.Tokens) == 0 {
		return nil, fmt.Errorf("facade: tokens %s: no tokens", name)
	}
	out := make([]tokenEntry, 0, len(f.Tokens))
	seen := map[[sha256.Size]byte]bool{}
	for i, e := range f.Tokens {
		en := tokenEntry{Identity: Identity{Name: cmp.Or(e.Name, fmt.Sprintf("token %d", i+1)), User: e.User}}
		bad := func(format string, a ...any) error {
			return fmt.Errorf("facade: tokens %s: %s: %s", name, en.Name, fmt.Sprintf(format, a...))
		}
		if hx, ok := strings.CutPrefix(e.Token, "sha256:"); ok {
			raw, err := hex.DecodeString(hx)
			if err != nil || len(raw) != sha256.Size {
				return nil, bad("sha256: needs 64 hex digits")
			}
			copy(en.hash[:], raw)
		} else {
			if len(e.Token) < minTokenBytes {
				return nil, bad("a token needs at least %d characters (or sha256:<hex>)", minTokenBytes)
			}
			en.hash = sha256.Sum256([]byte(e.Token))
		}
		if seen[en.hash] {
			return nil, bad("the same token as an earlier entry")
		}
		seen[en.hash] = true
		if e.User == "" {
			return nil, bad("no user")
		}
		if len(e.Sessions) == 0 {
			return nil, bad("no sessions (\"*\" is every session)")
		}
		var err error
		if en.Sessions, err = ParseSessions(e.Sessions); err != nil {
			return nil, bad("%v", err)
		}
		if en.Confirm, err = ParseConfirm(e.Confirm); err != nil {
			return nil, bad("%v", err)
		}
		out = append(out, en)
	}
	return out, nil
}

// Authenticate implements Authenticator.
func (t *Tokens) Authenticate(r *http.Request) (Identity, error) {
	tok, err := bearer(r)
	if err != nil {
		return Identity{}, err
	}
	h := sha256.Sum256([]byte(tok))
	t.mu.RLock()
	defer t.mu.RUnlock()
	// Every entry is compared, so the time taken says nothing of which
	// entry (if any) matched.
	match := -1
	for i := range t.entries {
		if subtle.ConstantTimeCompare(h[:], t.entries[i].hash[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return Identity{}, errors.New("unknown token")
	}
	return t.entries[match].Identity, nil
}

// HashToken returns the sha256:<hex> form of token, for a token file that
// holds no plaintext.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(h[:])
}
