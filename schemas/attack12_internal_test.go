package schemas

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// oldPointer is permission's rule_field walk as it was before
// schemas.Pointer replaced it: the reference the shared walk must match.
func oldPointer(v any, name string) (any, bool) {
	for _, tok := range strings.Split(name[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) || tok != strconv.Itoa(i) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// TestAttackPointer: hostile JSON pointers (escapes in either order, an
// empty token, index forms Atoi accepts but RFC 6901 does not: "01", "+1",
// "-0", " 1", "1e0", an overflow, "-") reach the same value through Pointer
// as through permission's former walk, so a rule_field names what it did.
func TestAttackPointer(t *testing.T) {
	var doc any
	if err := json.Unmarshal([]byte(`{"a/b":"slash","a~b":"tilde","~1":"tilde-one","":{"":"empty"},
		"a":{"b":"ab","/":"root"},"arr":["zero","one",{"x":"deep"}],"01":"key01","1":"key1"}`), &doc); err != nil {
		t.Fatal(err)
	}
	ptrs := []string{"/", "//", "/a~1b", "/a~0b", "/~01", "/~10", "/~0~1", "/~1", "/~", "/~2", "/a/b", "/a/~1", "/a/b/",
		"/arr/0", "/arr/1", "/arr/01", "/arr/+1", "/arr/-0", "/arr/ 1", "/arr/1e0", "/arr/-", "/arr/-1", "/arr/3",
		"/arr/99999999999999999999", "/arr/2/x", "/arr/2/x/y", "/01", "/1", "/arr", "/a//b"}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"/", "~", "0", "1", "a", "b", "arr", "x", "-", "+", ""}
	for range 2000 {
		var b strings.Builder
		b.WriteString("/")
		for range r.IntN(6) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		ptrs = append(ptrs, b.String())
	}
	for _, p := range ptrs {
		got, gok := Pointer(doc, p)
		want, wok := oldPointer(doc, p)
		if gok != wok || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Pointer(%q) = %v %v, permission's walk gave %v %v", p, got, gok, want, wok)
		}
	}
	for _, p := range []string{"a", "~1", "#/a"} { // not pointers: nothing
		if v, ok := Pointer(doc, p); ok {
			t.Errorf("Pointer(%q) = %v", p, v)
		}
	}
}

// TestAttackCacheBounds: a registrant who sends many distinct schemas, of
// sizes near the bound, one over it, and the same ones again, must not
// grow the compile cache past its entries or bytes, nor unbalance the
// byte count (which would evict everything, or nothing, from then on).
func TestAttackCacheBounds(t *testing.T) {
	const entries, maxB = 8, 1000
	c := newCompileCache(entries, maxB)
	r := rand.New(rand.NewPCG(3, 4))
	keys := map[cacheKey]int{}
	for i := range 5000 {
		n := i
		if i%3 == 0 {
			n = r.IntN(50) // repeats
		}
		k := cacheKey(sha256.Sum256([]byte(strconv.Itoa(n))))
		size := 1 + (n*37)%maxB
		if n%97 == 0 {
			size = maxB + 1
		}
		keys[k] = size
		c.put(k, nil, nil, size)
		c.get(cacheKey(sha256.Sum256([]byte(strconv.Itoa(r.IntN(50))))))
		c.mu.Lock()
		held, sum := c.lru.Len(), 0
		for _, k := range c.lru.Keys() {
			e, _ := c.lru.Peek(k)
			sum += e.size
		}
		bytes := c.bytes
		c.mu.Unlock()
		if held > entries || bytes > maxB || bytes != sum {
			t.Fatalf("after %d puts: %d entries, %d bytes counted, %d held (bounds %d, %d)", i+1, held, bytes, sum, entries, maxB)
		}
	}
}
