package facade

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// TestAttack36SlowJWKS (session 36, red team): anyone who can reach the
// facade sends a token naming an unknown kid, and the JWKS fetch it starts
// hangs (a slow or unreachable issuer: up to 10 s). Every other request's
// authentication waited for it behind one mutex, once per MinRefresh (and
// every minute while keys older than MaxAge could not be fetched). Only the
// request that starts a fetch waits for it now.
func TestAttack36SlowJWKS(t *testing.T) {
	is := newIssuer(t)
	entered, release := make(chan struct{}, 4), make(chan struct{})
	var first atomic.Bool
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if first.CompareAndSwap(false, true) {
			is.srv.Config.Handler.ServeHTTP(w, r)
			return
		}
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	stop := sync.OnceFunc(func() { close(release) })
	t.Cleanup(stop) // runs before slow.Close
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	o, err := NewOAuth(t.Context(), OAuthConfig{Issuer: testIssuer, Resource: testResource, JWKS: slow.URL, MinRefresh: time.Minute, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(61 * time.Second))
	sessions := map[string]any{"toolbus_sessions": "o1"}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	unknown := is.sign(t, jose.RS256, "rsa9", other, goodClaims(now()), sessions)
	attacker := make(chan error, 1)
	go func() { _, err := o.Authenticate(authRequest(unknown)); attacker <- err }()
	<-entered // the attacker's fetch hangs in the JWKS server
	// A good token, then a second unknown kid (no second fetch), each
	// answered while the fetch hangs.
	for _, c := range []struct {
		tok    string
		accept bool
	}{{is.sign(t, jose.RS256, "rsa1", is.rsa, goodClaims(now()), sessions), true}, {unknown, false}} {
		done := make(chan error, 1)
		go func() { _, err := o.Authenticate(authRequest(c.tok)); done <- err }()
		select {
		case err := <-done:
			if (err == nil) != c.accept {
				t.Fatalf("during a hung fetch, accepted %v, want %v: %v", err == nil, c.accept, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("authentication waited for another request's JWKS fetch")
		}
	}
	stop()
	if err := <-attacker; err == nil {
		t.Fatal("a token of an unknown key accepted")
	}
	if len(entered) != 0 {
		t.Fatal("a second fetch within MinRefresh")
	}
}

// attackerJWKS serves a JWKS of the attacker's key under the issuer's kid
// "rsa1", counting fetches.
func attackerJWKS(t *testing.T) (*rsa.PrivateKey, *httptest.Server, *atomic.Int64) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	var fetches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetches.Add(1)
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "rsa1", Algorithm: "RS256"}}})
	}))
	t.Cleanup(srv.Close)
	return key, srv, &fetches
}

// TestAttack36JWKSRedirect (session 36, red team): the https JWKS URL
// answers a redirect to plain http (a misconfigured issuer, or a proxy); the
// default client followed it, so whoever sits on that path served the keys
// every token is checked with. A redirect that leaves https is refused; one
// from https to https is still followed.
func TestAttack36JWKSRedirect(t *testing.T) {
	is := newIssuer(t)
	evilKey, evil, evilFetches := attackerJWKS(t)
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/jwks", http.StatusFound)
		case "/jwks":
			is.srv.Config.Handler.ServeHTTP(w, r)
		default:
			http.Redirect(w, r, "http://keys.example/jwks", http.StatusFound)
		}
	}))
	t.Cleanup(tls.Close)
	client := tls.Client()
	tr := client.Transport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if strings.HasPrefix(addr, "keys.example:") { // the attacker on the path of plain http
			addr = evil.Listener.Addr().String()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	client.Transport = tr
	cfg := OAuthConfig{Issuer: testIssuer, Resource: testResource, JWKS: tls.URL + "/keys", HTTPClient: client}
	if o, err := NewOAuth(t.Context(), cfg); err == nil {
		tok := is.sign(t, jose.RS256, "rsa1", evilKey, goodClaims(time.Now()), map[string]any{"toolbus_sessions": "o1"})
		_, aerr := o.Authenticate(authRequest(tok))
		t.Fatalf("keys fetched over plain http after a redirect (%d fetches); the attacker's token: %v", evilFetches.Load(), aerr)
	}
	if n := evilFetches.Load(); n != 0 {
		t.Fatalf("the plain http URL was fetched %d times", n)
	}
	cfg.JWKS = tls.URL + "/moved"
	if _, err := NewOAuth(t.Context(), cfg); err != nil {
		t.Fatalf("an https to https redirect: %v", err)
	}
}

// TestAttack36TokenNamesItsKey (session 36, red team: held): a token that
// carries its own key ("jwk"), or names where to fetch one ("jku", "x5u"),
// signed with the attacker's key under the issuer's kid: only the issuer's
// JWKS is ever used, and the named URLs are never fetched.
func TestAttack36TokenNamesItsKey(t *testing.T) {
	is := newIssuer(t)
	evilKey, evil, evilFetches := attackerJWKS(t)
	o, err := NewOAuth(t.Context(), OAuthConfig{Issuer: testIssuer, Resource: testResource, JWKS: is.srv.URL, MinRefresh: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]*jose.SignerOptions{
		"jwk": {EmbedJWK: true},
		"jku": (&jose.SignerOptions{}).WithHeader("kid", "rsa1").WithHeader("jku", evil.URL),
		"x5u": (&jose.SignerOptions{}).WithHeader("kid", "rsa1").WithHeader("x5u", evil.URL),
		"kid": (&jose.SignerOptions{}).WithHeader("kid", evil.URL),
	} {
		sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: evilKey}, opts)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.Signed(sig).Claims(goodClaims(time.Now())).Claims(map[string]any{"toolbus_sessions": "*"}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		if id, err := o.Authenticate(authRequest(tok)); err == nil {
			t.Errorf("a token naming its own key (%s) accepted as %+v", name, id)
		}
	}
	if n := evilFetches.Load(); n != 0 {
		t.Fatalf("the URL a token named was fetched %d times", n)
	}
}
