package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestAttackStaleBeatsKept (session 34, red team): a worker confined to
// one tool registers it once under each of many worker ids (an id is the
// worker's claim), each beat listing thousands of calls in flight, and
// never beats again. P_workers forgets the keys three heartbeats later (its
// TTL), but nothing tells the routers (a TTL's expiry makes no delete in a
// watch): every router kept each id's beat, its in-flight list whole, for
// its life, and scanned them all at every beat of the tool: 200 ids of
// 4,000 keys of about 30 bytes each are some 35 MB of strings in every
// router, for good. Now, at most once a heartbeat, the next beat of any
// tool first drops every beat seen no more for six heartbeats (twice the TTL).
func TestAttackStaleBeatsKept(t *testing.T) {
	const hb = time.Second
	wall := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return wall }
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	st, err := store.Setup(t.Context(), js, bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: hb})
	if err != nil {
		t.Fatal(err)
	}
	r := New(st, Config{Heartbeat: hb, Now: now})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, r.Stop)
	d := bus.ToolDef{Name: "t", Description: "Tool t.", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}
	inflight := make([]string, 4000)
	for i := range inflight {
		inflight[i] = fmt.Sprintf("session-%d.reply-%d.call-%d", i, i, i)
	}
	reg := func(id string) {
		t.Helper()
		ack, err := r.Register(t.Context(), Shared, "", bus.Register{Worker: id, Tools: []bus.ToolDef{d}, InFlight: map[string][]string{"t": inflight}})
		if err != nil || len(ack.Accepted) != 1 {
			t.Fatalf("register %s: %+v %v", id, ack, err)
		}
	}
	for i := range 200 {
		reg(fmt.Sprintf("w%d", i))
	}
	kept := func() int {
		r.liveness.mu.RLock()
		defer r.liveness.mu.RUnlock()
		return len(r.liveness.beats["t"])
	}
	t.Logf("after 200 registrations: %d beats kept", kept())
	// The watch delivers in order: once it brought a put made after them,
	// it brought theirs (a beat it brings later counts from when it came).
	if _, err := st.Workers.Put(t.Context(), "u.sentinel", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		r.liveness.mu.RLock()
		defer r.liveness.mu.RUnlock()
		if _, ok := r.liveness.beats["u"]["sentinel"]; !ok {
			return errors.New("the watch has not brought the sentinel yet")
		}
		return nil
	})
	mu.Lock()
	wall = wall.Add(7 * hb) // the attacker's workers beat no more
	mu.Unlock()
	reg("honest") // the tool's one real worker, beating on
	if n := kept(); n != 1 {
		t.Fatalf("%d beats kept 7 heartbeats after their workers' last beat (the P_workers keys expire after 3)", n)
	}
}
