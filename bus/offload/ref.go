package offload

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"net/url"
	"regexp"
	"strings"
)

// Ref is a parsed reference to a stored output (protocol 5.9):
// nats-object://<bucket>/<name>#sha256=<hex>.
type Ref struct {
	Bucket string
	Name   string
	// Digest is the SHA-256 of the object's bytes as 64 lower-case hex
	// digits; "" when the reference carries none (not a sealed result's).
	Digest string
}

// MaxRefLen bounds a reference's length: a toolbus name is at most about
// 420 bytes (three 128-byte ids, 32 hex digits, an index).
const MaxRefLen = 2048

// digestParam starts a reference's fragment: #sha256=<hex>, as package
// indexes write a download's digest (pip's #sha256=).
const digestParam = "sha256="

var (
	validBucket = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	validHex    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// String is the reference as a URL; the name is path-escaped (a literal
// '#' in a name becomes %23, so the first '#' always starts the digest).
func (r Ref) String() string {
	s := Scheme + "://" + r.Bucket + "/" + url.PathEscape(r.Name)
	if r.Digest != "" {
		s += "#" + digestParam + r.Digest
	}
	return s
}

// Session is the first dot-separated token of the name: the session a
// toolbus name starts with (a hint for whom to ask; never proof of owner).
func (r Ref) Session() string {
	s, _, _ := strings.Cut(r.Name, ".")
	return s
}

// ParseRef parses a reference and refuses anything else with a readable
// error: another scheme, a bad bucket, an empty or badly escaped name, a
// fragment other than #sha256=<64 lower-case hex digits>, more than
// MaxRefLen bytes.
func ParseRef(ref string) (Ref, error) {
	if len(ref) > MaxRefLen {
		return Ref{}, fmt.Errorf("reference %q is longer than %d bytes", short(ref), MaxRefLen)
	}
	rest, ok := strings.CutPrefix(ref, Scheme+"://")
	if !ok {
		return Ref{}, fmt.Errorf("reference %q is not a %s:// URL", short(ref), Scheme)
	}
	rest, frag, hasFrag := strings.Cut(rest, "#")
	bucket, name, ok := strings.Cut(rest, "/")
	if !ok || !validBucket.MatchString(bucket) {
		return Ref{}, fmt.Errorf("reference %q does not name a bucket (%s://<bucket>/<name>)", short(ref), Scheme)
	}
	name, err := url.PathUnescape(name)
	if err != nil || name == "" {
		return Ref{}, fmt.Errorf("reference %q does not name an object (%s://<bucket>/<name>)", short(ref), Scheme)
	}
	r := Ref{Bucket: bucket, Name: name}
	if hasFrag {
		d, ok := strings.CutPrefix(frag, digestParam)
		if !ok || !validHex.MatchString(d) {
			return Ref{}, fmt.Errorf("reference %q: the part after '#' must be %s<64 lower-case hex digits>", short(ref), digestParam)
		}
		r.Digest = d
	}
	return r, nil
}

func short(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// randomToken is 128 bits from crypto/rand as 32 hex digits: object
// names and chunk subjects nobody can guess from a neighbour's.
func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand.Read)
	return hex.EncodeToString(b[:])
}

// metaDigest is the object store's digest value (SHA-256=<base64url>) of
// a hex digest, and hexDigest the reverse ("" when it is not SHA-256).
func metaDigest(hexd string) string {
	b, err := hex.DecodeString(hexd)
	if err != nil {
		return ""
	}
	return "SHA-256=" + base64.URLEncoding.EncodeToString(b)
}

func hexDigest(meta string) string {
	v, ok := strings.CutPrefix(meta, "SHA-256=")
	if !ok {
		return ""
	}
	b, err := base64.URLEncoding.DecodeString(v)
	if err != nil {
		if b, err = base64.RawURLEncoding.DecodeString(v); err != nil {
			return ""
		}
	}
	if len(b) != sha256.Size {
		return ""
	}
	return hex.EncodeToString(b)
}

func sumHex(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }
