package presence

import (
	"encoding/json"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestAttackOneWriterFillsPresence (session 39, red team): one writer of
// P_routers (a router process with a bug, or anything holding the router
// login) keeps MaxRouters keys alive, renewing each every heartbeat. The
// table was full of live keys, so a router started afterwards was never
// kept: judged gone a lease after anything it ended, its lone batches'
// events were published again by every other router and its results mended,
// for as long as the writer ran. A router process puts one key, its id,
// naming itself in the value under an instance of its own: keys that name
// another router, or whose instance another key holds, are not kept, so
// one process holds one place. Left (the row in docs/security.md): a writer
// that makes up an id and an instance per key is many routers to anyone
// reading the bucket; the routers it shuts out are judged gone, which
// costs publishes the events stream de-duplicates and loses nothing.
func TestAttackOneWriterFillsPresence(t *testing.T) {
	const hb = time.Second
	for _, tc := range []struct {
		name string
		key  func(i int) entry
	}{
		{"one value under many keys", func(i int) entry {
			e := put("bug", "b1")
			e.key = fmt.Sprint("bug", i)
			return e
		}},
		{"one process naming each key", func(i int) entry { return put(fmt.Sprint("bug", i), "b1") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := New(nil, Config{ID: "me", Heartbeat: hb})
				p.apply(mine(p))
				fill := func() {
					for i := range MaxRouters {
						p.apply(tc.key(i))
					}
				}
				fill()
				p.apply(put("fresh", "f1")) // started after the fill
				time.Sleep(time.Millisecond)
				t0 := time.Now() // fresh ends something
				for range 4 {
					time.Sleep(hb)
					fill() // the writer renews every key
					p.apply(put("fresh", "f1"))
					p.apply(mine(p))
				}
				if got := p.Judge("fresh", t0); got != Outlived {
					t.Fatalf("a live router started after one writer's %d keys: %v, want outlived", MaxRouters, got)
				}
				if n := len(p.peers); n > 3 || len(p.owner) != n {
					t.Fatalf("%d routers kept, %d processes: one writer holds more than one place", n, len(p.owner))
				}
			})
		})
	}
}

// TestOwnerFollowsPeers: the instance table follows the routers kept
// (restart under the same id, a clean stop, the sweep), so it never holds
// a process the routers' table does not, and a restarted router's new
// process is kept.
func TestOwnerFollowsPeers(t *testing.T) {
	const hb = time.Second
	synctest.Test(t, func(t *testing.T) {
		p := New(nil, Config{ID: "me", Heartbeat: hb})
		p.apply(mine(p))
		p.apply(put("a", "a1"))
		p.apply(put("a", "a2")) // a restarted under the same id
		p.apply(entry{key: "a", op: jetstream.KeyValueDelete})
		p.apply(put("a", "a3"))
		if p.owner["a1"] != "" || p.owner["a3"] != "a" || p.peers["a"].instance != "a3" {
			t.Fatalf("after restarts: owners %v, peer %+v", p.owner, p.peers["a"])
		}
		for i := range MaxRouters - 2 {
			p.apply(put(fmt.Sprint("r", i), fmt.Sprint("i", i)))
			p.apply(entry{key: fmt.Sprint("r", i), op: jetstream.KeyValueDelete})
		}
		p.apply(put("late", "l1")) // sweeps the stopped ones
		if len(p.peers) != 3 || len(p.owner) != 3 || p.owner["l1"] != "late" {
			t.Fatalf("after the sweep: %d peers, owners %v", len(p.peers), p.owner)
		}
		v, _ := json.Marshal(Value{Router: "other", Instance: "x"})
		p.apply(entry{key: "late2", value: v, op: jetstream.KeyValuePut})
		if _, ok := p.peers["late2"]; ok {
			t.Fatal("a key naming another router was kept")
		}
	})
}

// BenchmarkOneWriterBeat: what one writer renewing MaxRouters keys under
// one process costs every router per heartbeat (a watch delivery each).
func BenchmarkOneWriterBeat(b *testing.B) {
	p := New(nil, Config{ID: "me", Heartbeat: time.Second})
	keys := make([]entry, MaxRouters)
	for i := range keys {
		keys[i] = put(fmt.Sprint("bug", i), "b1")
	}
	for b.Loop() {
		for _, k := range keys {
			p.apply(k)
		}
	}
}
