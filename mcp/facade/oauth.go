package facade

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/loopback"
)

// OAuthConfig configures the facade as an OAuth 2.1 resource server (the
// MCP authorization spec, 2025-06-18 and later): access tokens are JWTs
// signed by the issuer's keys, for this resource.
type OAuthConfig struct {
	// Issuer is the authorization server's issuer identifier; a token's
	// "iss" must be exactly it. Required.
	Issuer string
	// Resource is the facade's canonical URL (RFC 8707, e.g.
	// https://mcp.example.com/mcp); a token's "aud" must contain it, and
	// it is the "resource" of the RFC 9728 metadata. Required.
	Resource string
	// JWKS is where the issuer's public keys are: an https URL (http only
	// for a loopback host), or a file. Required.
	JWKS string
	// UserClaim is the claim holding the user; "" means "sub".
	UserClaim string
	// SessionsClaim is the claim listing the sessions the token may use
	// (a JSON array or a space-separated string of ids and prefix*
	// patterns); "" means "toolbus_sessions". Scopes (the "scope" string
	// or the "scp" array) "toolbus:session:<pattern>" add to it.
	SessionsClaim string
	// Leeway is the clock skew allowed on exp, nbf and iat; zero means
	// 30s.
	Leeway time.Duration
	// MinRefresh is the least time between two fetches of the JWKS (a
	// token with an unknown key id fetches it again); zero means 60s.
	MinRefresh time.Duration
	// MaxAge is how long fetched keys are used before they are fetched
	// again; zero means 1h.
	MaxAge time.Duration
	// HTTPClient fetches the JWKS (its CheckRedirect replaced: none off
	// https); nil means a client with a 10s timeout.
	HTTPClient *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Algorithms are the JWS algorithms an access token may use: asymmetric only
// (never "none" nor HMAC, whose key would be the public one).
var Algorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}

// Bounds of a JWKS fetch.
const (
	maxJWKSBytes = 1 << 20
	jwksTimeout  = 10 * time.Second
)

// ScopeSessionPrefix starts a scope naming a session (pattern) the token
// may use.
const ScopeSessionPrefix = "toolbus:session:"

// OAuth authenticates bearer JWTs and serves the RFC 9728 metadata at
// /.well-known/oauth-protected-resource, which 401 answers name. It is safe
// for concurrent use.
type OAuth struct {
	cfg     OAuthConfig
	metaURL string

	mu      sync.Mutex // never held while fetching
	keys    []jose.JSONWebKey
	fetched time.Time // last fetch started (one per MinRefresh)
	loaded  time.Time // last successful fetch
}

// NewOAuth checks cfg and loads the keys once (an error when they cannot
// be loaded: a facade that could never accept a token should not start).
func NewOAuth(ctx context.Context, cfg OAuthConfig) (*OAuth, error) {
	if cfg.Issuer == "" || cfg.Resource == "" || cfg.JWKS == "" {
		return nil, errors.New("facade: OAuth needs an issuer, a resource (audience) and a JWKS URL or file")
	}
	meta, err := metadataURL(cfg.Resource)
	if err != nil {
		return nil, err
	}
	if err := checkJWKSURL(cfg.JWKS); err != nil {
		return nil, err
	}
	cfg.UserClaim = cmp.Or(cfg.UserClaim, "sub")
	cfg.SessionsClaim = cmp.Or(cfg.SessionsClaim, "toolbus_sessions")
	orDefault(&cfg.Leeway, 30*time.Second)
	orDefault(&cfg.MinRefresh, time.Minute)
	orDefault(&cfg.MaxAge, time.Hour)
	cfg.HTTPClient = jwksClient(cfg.HTTPClient)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	o := &OAuth{cfg: cfg, metaURL: meta, fetched: cfg.Now()}
	keys, err := o.load(ctx)
	if err != nil {
		return nil, err
	}
	o.keys, o.loaded = keys, o.fetched
	return o, nil
}

// jwksClient is c (nil: one with a 10s timeout) with its CheckRedirect
// replaced: at most 10 redirects, none leaving https nor to plain http off
// loopback, where whoever sits on the path would serve the keys
// (docs/security.md, session 36).
func jwksClient(c *http.Client) *http.Client {
	out := http.Client{Timeout: jwksTimeout}
	if c != nil {
		out = *c
	}
	out.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 || via[0].URL.Scheme == "https" && req.URL.Scheme != "https" || checkJWKSURL(req.URL.String()) != nil {
			return fmt.Errorf("a redirect to %s: past 10, or off https", req.URL.Redacted())
		}
		return nil
	}
	return &out
}

func isURL(s string) bool { return strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://") }

// checkJWKSURL checks a JWKS that is a URL (not a file).
func checkJWKSURL(s string) error {
	if !isURL(s) {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return fmt.Errorf("facade: JWKS URL %q is not a URL", s)
	}
	if u.Scheme == "http" && !loopback.Host(u.Hostname()) {
		return fmt.Errorf("facade: JWKS URL %q: plain http only for a loopback host; use https", s)
	}
	return nil
}

// Metadata is the RFC 9728 protected resource metadata.
func (o *OAuth) Metadata() server.ProtectedResourceMetadataConfig {
	return server.ProtectedResourceMetadataConfig{Resource: o.cfg.Resource, AuthorizationServers: []string{o.cfg.Issuer},
		BearerMethodsSupported: []string{"header"}, ResourceName: "toolbus"}
}

// Authenticate checks the token: a JWS signed with one of Algorithms by a
// JWKS key (by kid, else every key of its type), with the issuer, an
// audience holding the resource, exp ahead, nbf/iat not ahead (within
// Leeway), and a user.
func (o *OAuth) Authenticate(r *http.Request) (Identity, error) {
	raw, err := bearer(r)
	if err != nil {
		return Identity{}, err
	}
	tok, err := jwt.ParseSigned(raw, Algorithms)
	if err != nil {
		return Identity{}, fmt.Errorf("not a JWT signed with an allowed algorithm: %w", err)
	}
	if len(tok.Headers) != 1 {
		return Identity{}, errors.New("a JWT needs exactly one signature")
	}
	h := tok.Headers[0]
	var std jwt.Claims
	var claims map[string]any
	verifies := func(k jose.JSONWebKey) bool { return tok.Claims(k.Key, &std, &claims) == nil }
	if !slices.ContainsFunc(o.candidates(r.Context(), h.KeyID, h.Algorithm), verifies) {
		return Identity{}, errors.New("the token's signature matches no key of the issuer")
	}
	if std.Expiry == nil {
		return Identity{}, errors.New("the token has no exp")
	}
	if len(std.Audience) == 0 {
		return Identity{}, errors.New("the token has no aud")
	}
	err = std.ValidateWithLeeway(jwt.Expected{Issuer: o.cfg.Issuer, AnyAudience: jwt.Audience{o.cfg.Resource}, Time: o.cfg.Now()}, o.cfg.Leeway)
	switch {
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return Identity{}, errors.New("the token's issuer is not this facade's")
	case errors.Is(err, jwt.ErrInvalidAudience):
		return Identity{}, errors.New("the token is not for this resource (aud)")
	case errors.Is(err, jwt.ErrExpired):
		return Identity{}, errors.New("the token has expired")
	case err != nil:
		return Identity{}, fmt.Errorf("the token is not valid now: %w", err)
	}
	user, _ := claims[o.cfg.UserClaim].(string)
	if user == "" {
		return Identity{}, fmt.Errorf("the token has no %s claim to name its user", o.cfg.UserClaim)
	}
	sessions, err := o.sessions(claims)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Name: "jwt:" + std.Subject, User: user, Sessions: sessions}, nil
}

// sessions collects the session patterns of the claims; a malformed one
// refuses the token.
func (o *OAuth) sessions(claims map[string]any) (Sessions, error) {
	out := words(claims[o.cfg.SessionsClaim])
	for _, s := range append(words(claims["scope"]), words(claims["scp"])...) {
		if p, ok := strings.CutPrefix(s, ScopeSessionPrefix); ok {
			out = append(out, p)
		}
	}
	return ParseSessions(out)
}

// words is a claim as a list: a JSON array of strings, or one
// space-separated string.
func words(v any) []string {
	switch v := v.(type) {
	case string:
		return strings.Fields(v)
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// candidates returns the keys that may have signed a token with kid and
// alg, fetching the JWKS again when none has the kid (at most every
// MinRefresh) or the keys are older than MaxAge. Only the request that
// starts a fetch waits for it: the others go on with the keys loaded (a
// slow or unreachable JWKS host stalled every token otherwise).
func (o *OAuth) candidates(ctx context.Context, kid, alg string) []jose.JSONWebKey {
	o.mu.Lock()
	now := o.cfg.Now()
	match := o.matchLocked(kid, alg)
	fetch := (len(match) == 0 || now.Sub(o.loaded) > o.cfg.MaxAge) && now.Sub(o.fetched) >= o.cfg.MinRefresh
	if fetch {
		o.fetched = now
	}
	o.mu.Unlock()
	if !fetch {
		return match
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jwksTimeout)
	keys, err := o.load(fctx)
	cancel()
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil { // on failure the keys already loaded stay
		o.keys, o.loaded = keys, o.cfg.Now()
	}
	return o.matchLocked(kid, alg)
}

func (o *OAuth) matchLocked(kid, alg string) []jose.JSONWebKey {
	var out []jose.JSONWebKey
	for _, k := range o.keys {
		if (kid == "" || k.KeyID == kid) && (k.Algorithm == "" || k.Algorithm == alg) && keyFits(k.Key, alg) {
			out = append(out, k)
		}
	}
	return out
}

// keyFits reports whether key's type is the one alg signs with.
func keyFits(key any, alg string) bool {
	switch key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		return strings.HasPrefix(alg, "ES")
	case ed25519.PublicKey:
		return alg == string(jose.EdDSA)
	}
	return false
}

// load reads the JWKS (bounded in size and time) and returns its
// asymmetric signing keys, public halves only.
func (o *OAuth) load(ctx context.Context) ([]jose.JSONWebKey, error) {
	b, err := o.read(ctx)
	if err != nil {
		return nil, fmt.Errorf("facade: JWKS %s: %w", o.cfg.JWKS, err)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("facade: JWKS %s: %w", o.cfg.JWKS, err)
	}
	var keys []jose.JSONWebKey
	for _, raw := range set.Keys {
		var k jose.JSONWebKey
		if json.Unmarshal(raw, &k) != nil || !k.Valid() || (k.Use != "" && k.Use != "sig") {
			continue // a key of a kind we do not use is skipped, not fatal
		}
		if !k.IsPublic() {
			k = k.Public()
		}
		if k.Key == nil || !slices.ContainsFunc([]string{"RS256", "ES256", "EdDSA"}, func(a string) bool { return keyFits(k.Key, a) }) {
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("facade: JWKS %s: no asymmetric signing key", o.cfg.JWKS)
	}
	return keys, nil
}

func (o *OAuth) read(ctx context.Context) ([]byte, error) {
	var r io.Reader
	if isURL(o.cfg.JWKS) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.cfg.JWKS, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		resp, err := o.cfg.HTTPClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		r = resp.Body
	} else {
		f, err := os.Open(o.cfg.JWKS)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxJWKSBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxJWKSBytes)
	}
	return b, nil
}
