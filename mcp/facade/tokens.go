package facade

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"
)

// Tokens authenticates bearer tokens listed in a token file (YAML or
// JSON, unknown members refused):
//
//	tokens:
//	  - name: alice-laptop          # for logs; default: the entry's position
//	    token: sha256:9f86d0...     # SHA-256 of the token, hex; or the token itself
//	    user: alice                 # the user of every call and listing
//	    sessions: [s1, "dev-*"]     # ids and prefix* patterns; "*" is every session
//	    confirm: host_user          # or approvers; default: the facade's
//
// Only the tokens' SHA-256 are kept in memory. It is safe for concurrent
// use; Reload reads the file again.
type Tokens struct {
	path string

	mu      sync.RWMutex
	entries []tokenEntry
}

type tokenEntry struct {
	name     string
	hash     [sha256.Size]byte
	user     string
	sessions Sessions
	confirm  Confirm
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

// ParseTokens decodes a token file's bytes; name is for errors.
func ParseTokens(name string, b []byte) (*Tokens, error) {
	entries, err := parseTokens(name, b)
	if err != nil {
		return nil, err
	}
	return &Tokens{entries: entries}, nil
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
		en := tokenEntry{name: e.Name, user: e.User}
		en.name = cmp.Or(en.name, fmt.Sprintf("token %d", i+1))
		bad := func(format string, a ...any) error {
			return fmt.Errorf("facade: tokens %s: %s: %s", name, en.name, fmt.Sprintf(format, a...))
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
		if en.sessions, err = ParseSessions(e.Sessions); err != nil {
			return nil, bad("%v", err)
		}
		if en.confirm, err = ParseConfirm(e.Confirm); err != nil {
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
	e := t.entries[match]
	return Identity{Name: e.name, User: e.user, Sessions: e.sessions, Confirm: e.confirm}, nil
}

// HashToken returns the sha256:<hex> form of token, for a token file that
// holds no plaintext.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(h[:])
}
