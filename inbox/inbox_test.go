package inbox

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr      string
		generated bool
		ok        bool
	}{
		{"127.0.0.1:8080", true, true},
		{"[::1]:8080", true, true},
		{"localhost:8080", true, true},
		{"0.0.0.0:8080", true, false},
		{":8080", true, false},
		{"192.168.1.5:8080", true, false},
		{"0.0.0.0:8080", false, true},
		{"nonsense", true, false},
	} {
		if err := CheckListen(c.addr, c.generated); (err == nil) != c.ok {
			t.Errorf("CheckListen(%q, generated %v) = %v", c.addr, c.generated, err)
		}
	}
}

func TestToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(file, []byte("from-the-file-0123456789\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, gen, err := Token("", "")
	if err != nil || !gen || len(tok) != 32 {
		t.Fatalf("generated: %q %v %v", tok, gen, err)
	}
	if tok, gen, err := Token("given-token-0123456789", ""); err != nil || gen || tok != "given-token-0123456789" {
		t.Fatalf("given: %q %v %v", tok, gen, err)
	}
	if tok, _, err := Token("", file); err != nil || tok != "from-the-file-0123456789" {
		t.Fatalf("file: %q %v", tok, err)
	}
	for _, bad := range [][2]string{{"short", ""}, {"given-token-0123456789", file}, {"", filepath.Join(t.TempDir(), "none")}} {
		if _, _, err := Token(bad[0], bad[1]); err == nil {
			t.Errorf("Token(%q, %q) took it", bad[0], bad[1])
		}
	}
}

func TestAnswerOf(t *testing.T) {
	confirm := Item{ID: "c1", Tool: "deploy", Kind: bus.KindConfirm}
	ext := Item{ID: "c1", Tool: "ticket", Kind: bus.KindExternal}
	for _, c := range []struct {
		name string
		it   Item
		act  Act
		want string // the answer as JSON, or "error: <substring>"
	}{
		{"allow", confirm, Act{Action: "allow", InputDigest: "sha256:x"}, `{"confirmed":true,"input_digest":"sha256:x"}`},
		{"remember", confirm, Act{Action: "allow", Rules: []bus.Rule{{Tool: "deploy"}}}, `{"confirmed":true,"rules":[{"tool":"deploy"}]}`},
		{"deny", confirm, Act{Action: "deny", Reason: " not today "}, `{"confirmed":false,"reason":"not today"}`},
		{"deny drops rules", confirm, Act{Action: "deny", Rules: []bus.Rule{{Tool: "deploy"}}}, `{"confirmed":false}`},
		{"long reason", confirm, Act{Action: "deny", Reason: strings.Repeat("x", bus.MaxDenyReason+1)}, "error: at most"},
		{"answer a confirmation", confirm, Act{Action: "answer", Output: "x"}, "error: waits for a confirmation"},
		{"text", ext, Act{Action: "answer", Output: "done"}, `{"state":"success","output":[{"type":"text","text":"done"}]}`},
		{"json", ext, Act{Action: "answer", Format: "json", Output: `{"b": 1, "a": [2]}`}, `{"state":"success","output":[{"type":"text","text":"{\"a\":[2],\"b\":1}"}]}`},
		{"json blocks", ext, Act{Action: "answer", Format: "json", Output: `[{"type":"text","text":"hi"}]`}, `{"state":"success","output":[{"type":"text","text":"hi"}]}`},
		{"json array", ext, Act{Action: "answer", Format: "json", Output: `[1, 2]`}, `{"state":"success","output":[{"type":"text","text":"[1,2]"}]}`},
		{"bad json", ext, Act{Action: "answer", Format: "json", Output: `{"a":`}, "error: not JSON"},
		{"two values", ext, Act{Action: "answer", Format: "json", Output: `1 2`}, "error: more than one value"},
		{"error state", ext, Act{Action: "answer", State: "error", Output: "broke"}, `{"state":"error","output":[{"type":"text","text":"broke"}]}`},
		{"bad state", ext, Act{Action: "answer", State: "maybe"}, "error: state must be"},
		{"bad format", ext, Act{Action: "answer", Format: "xml"}, "error: format must be"},
		{"allow external", ext, Act{Action: "allow"}, "error: waits for its external result"},
		{"unknown", ext, Act{Action: "shrug"}, "error: action must be"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := answerOf(c.it, c.act)
			if want, ok := strings.CutPrefix(c.want, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("got %+v, %v; want an error with %q", a, err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(a)
			if string(b) != c.want {
				t.Fatalf("got %s, want %s", b, c.want)
			}
		})
	}
}

// TestGuard checks the access rules without a deployment: 401 without the
// token's header on the API (a cookie is not enough), the page public.
func TestGuard(t *testing.T) {
	const tok = "guard-test-token-0123456789"
	s := &Server{cfg: Config{Token: tok}, guess: make(chan struct{}, 1)}
	h := s.guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	do := func(method, target string, set func(*http.Request)) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, target, nil)
		if set != nil {
			set(r)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	// The page and its assets hold no token and no data; a token in the
	// page's URL, right or wrong, is refused at once (session 39: the
	// browser's history keeps the URL); the login needs no token.
	if w := do("GET", "/?code=x", nil); w.Code != http.StatusTeapot || len(w.Result().Cookies()) != 0 {
		t.Fatalf("the page: %d %+v (no cookie: it would go to every port of the host)", w.Code, w.Result().Cookies())
	}
	for _, v := range []string{"wrong", tok} {
		if w := do("GET", "/?token="+v, nil); w.Code != http.StatusBadRequest {
			t.Fatalf("a token in the URL: %d", w.Code)
		}
	}
	if w := do("POST", "/api/login", nil); w.Code != http.StatusTeapot {
		t.Fatalf("the login: %d", w.Code)
	}
	withCookie := func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "toolbus_inbox", Value: tok}) }
	withHeader := func(r *http.Request) { r.Header.Set(TokenHeader, tok) }
	for _, m := range []string{"GET /api/events", "GET /api/calls", "POST /api/act"} {
		method, path, _ := strings.Cut(m, " ")
		if w := do(method, path, withCookie); w.Code != http.StatusUnauthorized {
			t.Fatalf("%s with a cookie only: %d", m, w.Code)
		}
		if w := do(method, path, withHeader); w.Code != http.StatusTeapot {
			t.Fatalf("%s with the header: %d", m, w.Code)
		}
	}
	if w := do("GET", "/", withCookie); w.Header().Get("Content-Security-Policy") == "" || w.Header().Get("X-Frame-Options") != "DENY" {
		t.Fatalf("headers %v", w.Header())
	}
}

// FuzzAct feeds arbitrary action bodies through the decoding and the
// answer building: an error or an answer, never a panic.
func FuzzAct(f *testing.F) {
	f.Add(`{"key":"s.r.c","revision":3,"action":"allow","rules":[{"tool":"x"}]}`, "confirm")
	f.Add(`{"action":"answer","format":"json","output":"[{\"type\":\"text\"}]"}`, "external")
	f.Add(`{"action":"deny","reason":"\u0000"}`, "confirm")
	f.Fuzz(func(t *testing.T, body, kind string) {
		var a Act
		dec := json.NewDecoder(strings.NewReader(body))
		dec.DisallowUnknownFields()
		if dec.Decode(&a) != nil {
			return
		}
		_ = validKey(a.Key)
		_, _ = answerOf(Item{ID: "c1", Tool: "t", Kind: kind}, a)
	})
}
