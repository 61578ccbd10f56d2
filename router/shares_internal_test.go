package router

import (
	"strings"
	"sync"
	"testing"
)

// bindings is Identities over a map.
type bindings map[string]string

func (b bindings) UserOf(s string) (string, bool) { u := b[s]; return u, u != "" }

// OwnAgent: a session in the map has its own agent login, bound to the
// user it maps to, or to none ("").
func (b bindings) OwnAgent(s string) bool { _, ok := b[s]; return ok }

// TestSharesDefaults: the share a router's MaxInflight and
// MaxSessionInflight give, and the unbound sessions' pool.
func TestSharesDefaults(t *testing.T) {
	for _, c := range []struct {
		inflight, most int
		ids            Identities
		wantMost       int
		wantPool       int
	}{
		{4096, 0, nil, 512, 0},           // the default router: an eighth
		{64, 0, nil, 16, 0},              // at least 16
		{8, 0, nil, 8, 0},                // a small router: every slot, no share in effect
		{4096, 100, nil, 100, 0},         // set
		{16, 100, nil, 16, 0},            // never more than the slots
		{4096, -1, nil, 0, 0},            // off
		{4096, 0, bindings{}, 512, 3072}, // identities: the pool, three quarters
		{4096, -1, bindings{}, 0, 0},     // off: no pool either
		{1024, 0, bindings{"s": "u"}, 128, 768},
	} {
		s := newShares(c.inflight, c.most, c.ids)
		if s.most != c.wantMost || s.pool != c.wantPool {
			t.Errorf("newShares(%d, %d, ids %v): share %d, pool %d; want %d, %d", c.inflight, c.most, c.ids != nil, s.most, s.pool, c.wantMost, c.wantPool)
		}
	}
}

// TestSharesAccounting: a session takes up to its share and is refused
// past it while other sessions take theirs; a slot given back can be taken
// again; with identities the shared agent's sessions (no agent login of
// their own) share one pool, sessions with a login of their own, bound to
// a user or not, are outside it, and a session bound or unbound while it
// holds slots gives each back where it took it.
func TestSharesAccounting(t *testing.T) {
	ids := bindings{"alice-s": "alice", "own-s": ""} // own-s: an agent login of its own, no user
	s := &shares{most: 2, pool: 3, held: map[string]int{}, shared: func(x string) bool { return sharedAgents(ids, x) }}
	type step struct {
		op      string // take or give (the n-th share taken, counting from 0)
		session string
		n       int
		refused string // a word of the refusal; "" means taken
	}
	var taken []share
	steps := []step{
		{"take", "a", 0, ""},
		{"take", "a", 1, ""},
		{"take", "a", 0, "this session holds its share"}, // a's share is 2
		{"take", "b", 2, ""},                             // b is another session: served
		{"take", "alice-s", 3, ""},                       // bound: outside the pool
		{"take", "alice-s", 4, ""},
		{"take", "c", 0, "sessions bound to no user"}, // a, a, b: the pool of 3 is full
		{"give", "a", 0, ""},
		{"take", "c", 5, ""},                          // a slot of the pool came back
		{"take", "a", 0, "sessions bound to no user"}, // a holds one of its two, but the pool is full again
		{"take", "alice-s", 0, "this session holds its share"},
		{"take", "own-s", 6, ""}, // a login of its own (1.13): outside the pool though unbound
		{"take", "own-s", 7, ""},
		{"take", "own-s", 0, "this session holds its share"}, // its own share still holds
	}
	for i, st := range steps {
		switch st.op {
		case "take":
			sh, refused := s.take(st.session)
			if (refused == "") != (st.refused == "") || !strings.Contains(refused, st.refused) {
				t.Fatalf("step %d, take %s: refused %q, want %q", i, st.session, refused, st.refused)
			}
			if refused == "" {
				if len(taken) != st.n {
					t.Fatalf("step %d: %d taken before, want %d", i, len(taken), st.n)
				}
				taken = append(taken, sh)
			}
		case "give":
			s.give(taken[st.n])
			taken[st.n] = share{}
		}
	}
	if got := s.pooled; got != 3 {
		t.Fatalf("pooled %d after the steps, want 3 (one of a's, b, c)", got)
	}
	// A session bound while it holds slots gives them back to the pool.
	ids["c"] = "carol"
	for i, sh := range taken {
		s.give(sh)
		taken[i] = share{}
	}
	if s.pooled != 0 || len(s.held) != 0 {
		t.Fatalf("after every slot was given back: pooled %d, held %v", s.pooled, s.held)
	}
	// A zero share (no shares) counts nothing.
	var off shares
	if sh, refused := off.take("a"); refused != "" || sh.counted {
		t.Fatalf("no shares: %+v %q", sh, refused)
	}
	off.give(share{})
}

// TestSharesRace: many goroutines taking and giving never hold more than
// the share nor leave a count behind.
func TestSharesRace(t *testing.T) {
	s := newShares(64, 4, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	most := 0
	for g := range 16 {
		wg.Go(func() {
			session := []string{"a", "b"}[g%2]
			for range 500 {
				sh, refused := s.take(session)
				if refused != "" {
					continue
				}
				s.mu.Lock()
				n := s.held[session]
				s.mu.Unlock()
				mu.Lock()
				most = max(most, n)
				mu.Unlock()
				s.give(sh)
			}
		})
	}
	wg.Wait()
	if most > 4 || len(s.held) != 0 {
		t.Fatalf("at most %d held by a session (share 4); left %v", most, s.held)
	}
}

// BenchmarkShares is the cost a batch pays for its session's share: one
// take and one give, with identities (the pool's look-up) and without.
func BenchmarkShares(b *testing.B) {
	for _, c := range []struct {
		name string
		ids  Identities
	}{{"open", nil}, {"identities", bindings{"s1": "alice"}}} {
		b.Run(c.name, func(b *testing.B) {
			s := newShares(4096, 0, c.ids)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					sh, _ := s.take("s2")
					s.give(sh)
				}
			})
		})
	}
}
