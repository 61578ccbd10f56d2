package facade

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// TestAttackOAuthKeyInToken (session 38, red team): a forger signs with
// a key of its own and points the facade at it from the token's header:
// the key itself embedded (jwk), a JWKS URL (jku), a certificate URL (x5u),
// with the issuer's kid or one of its own. Only the issuer's configured
// JWKS is ever read: every such token is refused and the forger's URLs are
// never fetched; nor does a token signed by the issuer's key whose iat is
// ahead of the clock pass.
func TestAttackOAuthKeyInToken(t *testing.T) {
	is := newIssuer(t)
	now := time.Now()
	o, err := NewOAuth(t.Context(), OAuthConfig{Issuer: testIssuer, Resource: testResource, JWKS: is.srv.URL, MinRefresh: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	forger, _ := rsa.GenerateKey(rand.Reader, 2048)
	var hits atomic.Int64
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &forger.PublicKey, KeyID: "evil", Algorithm: "RS256"}}})
	}))
	defer evil.Close()
	sessions := map[string]any{"toolbus_sessions": []string{"o1"}}
	sign := func(opts *jose.SignerOptions, claims jwt.Claims, key any) string {
		return signWith(t, jose.RS256, key, opts, claims, sessions)
	}
	embedded := &jose.SignerOptions{EmbedJWK: true}
	future := goodClaims(now)
	future.IssuedAt = jwt.NewNumericDate(now.Add(10 * time.Minute))
	for name, tok := range map[string]string{
		"jwk embedded":           sign(embedded, goodClaims(now), forger),
		"jku, the issuer's kid":  sign((&jose.SignerOptions{}).WithHeader("jku", evil.URL).WithHeader("kid", "rsa1"), goodClaims(now), forger),
		"jku, its own kid":       sign((&jose.SignerOptions{}).WithHeader("jku", evil.URL).WithHeader("kid", "evil"), goodClaims(now), forger),
		"x5u":                    sign((&jose.SignerOptions{}).WithHeader("x5u", evil.URL).WithHeader("kid", "evil"), goodClaims(now), forger),
		"no kid, a foreign key":  sign(&jose.SignerOptions{}, goodClaims(now), forger),
		"iat ahead of the clock": sign((&jose.SignerOptions{}).WithHeader("kid", "rsa1"), future, is.rsa),
	} {
		if id, err := o.Authenticate(authRequest(tok)); err == nil {
			t.Errorf("%s: accepted as %+v", name, id)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the forger's URL was fetched %d times", n)
	}
	// The same claims signed by the issuer's key pass (the test's tokens are well formed).
	if _, err := o.Authenticate(authRequest(sign((&jose.SignerOptions{}).WithHeader("kid", "rsa1"), goodClaims(now), is.rsa))); err != nil {
		t.Fatal(err)
	}
}
