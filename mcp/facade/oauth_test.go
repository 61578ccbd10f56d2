package facade

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

const (
	testIssuer   = "https://issuer.example"
	testResource = "https://mcp.example/mcp"
)

// issuer is an authorization server's signing keys and the JWKS it
// serves (counting fetches).
type issuer struct {
	rsa     *rsa.PrivateKey
	ec      *ecdsa.PrivateKey
	ed      ed25519.PrivateKey
	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetches atomic.Int64
	srv     *httptest.Server
}

func newIssuer(t testing.TB) *issuer {
	t.Helper()
	is := &issuer{}
	var err error
	if is.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if is.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	if _, is.ed, err = ed25519.GenerateKey(rand.Reader); err != nil {
		t.Fatal(err)
	}
	is.keys = []jose.JSONWebKey{
		{Key: &is.rsa.PublicKey, KeyID: "rsa1", Algorithm: "RS256", Use: "sig"},
		{Key: &is.ec.PublicKey, KeyID: "ec1", Algorithm: "ES256"},
		{Key: is.ed.Public(), KeyID: "ed1"},
		{Key: []byte("a symmetric key is never used"), KeyID: "oct1"},
	}
	is.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		is.fetches.Add(1)
		is.mu.Lock()
		defer is.mu.Unlock()
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: is.keys})
	}))
	t.Cleanup(is.srv.Close)
	return is
}

// sign returns a JWT signed with alg by the issuer's key kid, with the
// standard claims std and the extra ones.
func (is *issuer) sign(t *testing.T, alg jose.SignatureAlgorithm, kid string, key any, std jwt.Claims, extra map[string]any) string {
	t.Helper()
	opts := &jose.SignerOptions{}
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	return signWith(t, alg, key, opts, std, extra)
}

// signWith signs an access token (typ at+jwt) with opts' headers.
func signWith(t *testing.T, alg jose.SignatureAlgorithm, key any, opts *jose.SignerOptions, std jwt.Claims, extra map[string]any) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts.WithType("at+jwt"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(sig).Claims(std).Claims(extra).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func goodClaims(now time.Time) jwt.Claims {
	return jwt.Claims{Issuer: testIssuer, Subject: "alice", Audience: jwt.Audience{testResource, "other"},
		Expiry: jwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now)}
}

func authRequest(tok string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/mcp/o1", nil)
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	return r
}

func TestOAuthTokens(t *testing.T) {
	is := newIssuer(t)
	now := time.Now()
	o, err := NewOAuth(t.Context(), OAuthConfig{Issuer: testIssuer, Resource: testResource, JWKS: is.srv.URL, MinRefresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sessions := map[string]any{"toolbus_sessions": []string{"o1"}, "scope": "openid toolbus:session:team-*"}
	good := is.sign(t, jose.RS256, "rsa1", is.rsa, goodClaims(now), sessions)
	id, err := o.Authenticate(authRequest(good))
	if err != nil || id.User != "alice" || !id.Sessions.Allows("o1") || !id.Sessions.Allows("team-x") || id.Sessions.Allows("o2") {
		t.Fatalf("good RS256 token: %+v %v", id, err)
	}
	for _, c := range []struct {
		alg jose.SignatureAlgorithm
		kid string
		key any
	}{{jose.ES256, "ec1", is.ec}, {jose.EdDSA, "ed1", is.ed}, {jose.EdDSA, "", is.ed}} {
		if _, err := o.Authenticate(authRequest(is.sign(t, c.alg, c.kid, c.key, goodClaims(now), sessions))); err != nil {
			t.Errorf("good %s token (kid %q): %v", c.alg, c.kid, err)
		}
	}

	// The public key as an HMAC secret, in the forms an attacker tries.
	der, _ := x509.MarshalPKIXPublicKey(&is.rsa.PublicKey)
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	hs := is.sign(t, jose.HS256, "rsa1", pemKey, goodClaims(now), sessions)
	hsDER := is.sign(t, jose.HS256, "rsa1", der, goodClaims(now), sessions)
	// alg none: a header and the claims, no signature.
	b64 := base64.RawURLEncoding.EncodeToString
	payload, _ := json.Marshal(map[string]any{"iss": testIssuer, "sub": "alice", "aud": testResource, "exp": now.Add(time.Hour).Unix(), "toolbus_sessions": []string{"o1"}})
	none := b64([]byte(`{"alg":"none","kid":"rsa1"}`)) + "." + b64(payload) + "."
	// Another key with a known kid.
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	bad := func(mod func(*jwt.Claims)) string {
		c := goodClaims(now)
		mod(&c)
		return is.sign(t, jose.RS256, "rsa1", is.rsa, c, sessions)
	}
	for name, tok := range map[string]string{
		"wrong aud":           bad(func(c *jwt.Claims) { c.Audience = jwt.Audience{"https://mcp.example/other"} }),
		"no aud":              bad(func(c *jwt.Claims) { c.Audience = nil }),
		"wrong iss":           bad(func(c *jwt.Claims) { c.Issuer = "https://evil.example" }),
		"expired":             bad(func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(now.Add(-2 * time.Minute)) }),
		"no exp":              bad(func(c *jwt.Claims) { c.Expiry = nil }),
		"not yet valid":       bad(func(c *jwt.Claims) { c.NotBefore = jwt.NewNumericDate(now.Add(10 * time.Minute)) }),
		"no user":             bad(func(c *jwt.Claims) { c.Subject = "" }),
		"alg none":            none,
		"HS256 with the PEM":  hs,
		"HS256 with the DER":  hsDER,
		"another key":         is.sign(t, jose.RS256, "rsa1", other, goodClaims(now), sessions),
		"RS256 on an EC kid":  is.sign(t, jose.RS256, "ec1", is.rsa, goodClaims(now), sessions),
		"garbage":             "abc.def.ghi",
		"bad session pattern": is.sign(t, jose.RS256, "rsa1", is.rsa, goodClaims(now), map[string]any{"toolbus_sessions": "a.b"}),
	} {
		if id, err := o.Authenticate(authRequest(tok)); err == nil {
			t.Errorf("%s: accepted as %+v", name, id)
		}
	}
	if _, err := o.Authenticate(authRequest("")); err == nil || !strings.Contains(err.Error(), ErrNoCredentials.Error()) {
		t.Fatalf("no token: %v", err)
	}

	// An unknown kid fetches the keys again, at most once per MinRefresh.
	before := is.fetches.Load()
	unknown := is.sign(t, jose.RS256, "rsa2", other, goodClaims(now), sessions)
	for range 3 {
		if _, err := o.Authenticate(authRequest(unknown)); err == nil {
			t.Fatal("a token of an unknown key accepted")
		}
	}
	if n := is.fetches.Load() - before; n != 0 {
		t.Fatalf("%d fetches within MinRefresh of the last", n)
	}
}

// TestOAuthKeyRotation: a new key published by the issuer is fetched
// when a token names its kid, once the minimum interval has passed.
func TestOAuthKeyRotation(t *testing.T) {
	is := newIssuer(t)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	o, err := NewOAuth(t.Context(), OAuthConfig{Issuer: testIssuer, Resource: testResource, JWKS: is.srv.URL, MinRefresh: time.Minute, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	next, _ := rsa.GenerateKey(rand.Reader, 2048)
	is.mu.Lock()
	is.keys = append(is.keys, jose.JSONWebKey{Key: &next.PublicKey, KeyID: "rsa2", Algorithm: "RS256"})
	is.mu.Unlock()
	tok := is.sign(t, jose.RS256, "rsa2", next, goodClaims(now()), map[string]any{"toolbus_sessions": "o1"})
	if _, err := o.Authenticate(authRequest(tok)); err == nil {
		t.Fatal("the new key was fetched before MinRefresh passed")
	}
	clock.Add(int64(61 * time.Second))
	if _, err := o.Authenticate(authRequest(tok)); err != nil {
		t.Fatalf("after MinRefresh: %v", err)
	}
	if n := is.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
}

func TestOAuthConfig(t *testing.T) {
	is := newIssuer(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "jwks.json")
	b, _ := json.Marshal(jose.JSONWebKeySet{Keys: is.keys})
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewOAuth(t.Context(), OAuthConfig{Issuer: testIssuer, Resource: testResource, JWKS: file}); err != nil {
		t.Fatalf("JWKS from a file: %v", err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, []byte(`{"keys":[`+strings.Repeat(" ", maxJWKSBytes)+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	sym := filepath.Join(dir, "sym.json")
	sb, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: []byte("secret"), KeyID: "k"}}})
	if err := os.WriteFile(sym, sb, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]OAuthConfig{
		"no issuer":           {Resource: testResource, JWKS: file},
		"relative resource":   {Issuer: testIssuer, Resource: "/mcp", JWKS: file},
		"resource with query": {Issuer: testIssuer, Resource: testResource + "?x=1", JWKS: file},
		"http JWKS off-host":  {Issuer: testIssuer, Resource: testResource, JWKS: "http://keys.example/jwks"},
		"JWKS too large":      {Issuer: testIssuer, Resource: testResource, JWKS: big},
		"only symmetric keys": {Issuer: testIssuer, Resource: testResource, JWKS: sym},
		"missing file":        {Issuer: testIssuer, Resource: testResource, JWKS: filepath.Join(dir, "none")},
	} {
		if _, err := NewOAuth(t.Context(), c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestOAuthFacade: the facade as a resource server: the RFC 9728
// metadata, 401 challenges naming it, a good token's call run as its
// user, a token for another session refused with insufficient_scope.
func TestOAuthFacade(t *testing.T) {
	is := newIssuer(t)
	o, err := NewOAuth(t.Context(), OAuthConfig{Issuer: testIssuer, Resource: testResource, JWKS: is.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, false, func(c *Config) { c.Auth, c.Insecure = o, false })
	const metaURL = "https://mcp.example/.well-known/oauth-protected-resource/mcp"
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource/mcp/o1"} {
		resp, err := http.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		var m server.ProtectedResourceMetadataConfig
		err = json.NewDecoder(resp.Body).Decode(&m)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || m.Resource != testResource || len(m.AuthorizationServers) != 1 ||
			m.AuthorizationServers[0] != testIssuer || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: HTTP %d %+v %v", path, resp.StatusCode, m, err)
		}
	}
	resp := e.post(t, "o1", nil)
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Bearer resource_metadata="`+metaURL+`"` {
		t.Fatalf("no token: HTTP %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	now := time.Now()
	expired := goodClaims(now)
	expired.Expiry = jwt.NewNumericDate(now.Add(-time.Hour))
	resp = e.post(t, "o1", bearerOf(is.sign(t, jose.RS256, "rsa1", is.rsa, expired, map[string]any{"toolbus_sessions": "o1"})))
	if h := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(h, `error="invalid_token"`) ||
		!strings.Contains(h, `resource_metadata="`+metaURL+`"`) {
		t.Fatalf("expired token: HTTP %d %q", resp.StatusCode, h)
	}
	tok := is.sign(t, jose.ES256, "ec1", is.ec, goodClaims(now), map[string]any{"scp": []string{"toolbus:session:o1"}})
	resp = e.post(t, "o2", bearerOf(tok))
	if h := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusForbidden || !strings.Contains(h, `error="insufficient_scope"`) {
		t.Fatalf("another session: HTTP %d %q", resp.StatusCode, h)
	}
	c := e.connectHeaders(t, "o1", mcp.ProtocolVersion20260728, bearerOf(tok))
	if r, err := call(t, c, "whoami", map[string]any{}, false); err != nil || r.IsError || textOf(r) != "user alice" {
		t.Fatalf("whoami: %+v %v", r, err)
	}
}

// FuzzOAuthAuthenticate: whatever the bearer token, Authenticate answers
// an error or an identity with a user, never panics, and never accepts
// what the issuer did not sign.
func FuzzOAuthAuthenticate(f *testing.F) {
	is := newIssuer(f)
	dir := f.TempDir()
	file := filepath.Join(dir, "jwks.json")
	b, _ := json.Marshal(jose.JSONWebKeySet{Keys: is.keys})
	if err := os.WriteFile(file, b, 0o600); err != nil {
		f.Fatal(err)
	}
	o, err := NewOAuth(f.Context(), OAuthConfig{Issuer: testIssuer, Resource: testResource, JWKS: file})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.")
	f.Add("a.b.c")
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		r := httptest.NewRequest(http.MethodPost, "/mcp/s", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		if id, err := o.Authenticate(r); err == nil {
			t.Fatalf("a token the issuer did not sign was accepted: %q as %+v", tok, id)
		}
	})
}
