package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestAttackBoundsOnACluster (session 34, protocol 1.24): on a 3-node
// cluster, every bucket R3, an agent fills P_parked to its soft bound with
// parks of large inputs, and P_sessions with sessions it makes up. The next
// new park ends limit_exceeded with nothing parked, the next new session's
// first write is refused limit_exceeded; every parked call can still be
// answered, cancelled or expire (replacements, which a discard-new bound
// alone refuses on a replicated stream at its bound), every session still
// be written; once the endings freed room, a new park parks again.
func TestAttackBoundsOnACluster(t *testing.T) {
	const parkedSoft, sessionsSoft = 64 << 10, 4 << 10
	c := testkit.RunCluster(t)
	var routers []*Router
	for node, id := range []string{"ra", "rb"} {
		r, err := New(testkit.ConnectURL(t, c.URL(node)), Config{ID: id,
			Store: store.Config{Replicas: 3, ParkedMaxBytes: parkedSoft, SessionsMaxBytes: sessionsSoft}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		testkit.Stop(t, r.Stop)
		routers = append(routers, r)
	}
	ra := routers[0]
	agentNC := testkit.ConnectURL(t, c.URL(2))
	js := testkit.JetStream(t, agentNC)
	for _, b := range []struct {
		bucket string
		soft   int64
	}{{bus.BucketParked, parkedSoft}, {bus.BucketSessions, sessionsSoft}} {
		s, err := js.Stream(t.Context(), "KV_"+ra.subj.Bucket(b.bucket))
		if err != nil {
			t.Fatal(err)
		}
		if cfg := s.CachedInfo().Config; cfg.MaxBytes != store.HardBytes(b.soft) || cfg.Discard != jetstream.DiscardNew || cfg.Replicas != 3 {
			t.Fatalf("%s: max_bytes %d, discard %v, replicas %d", b.bucket, cfg.MaxBytes, cfg.Discard, cfg.Replicas)
		}
	}

	reg, err := bus.NewEvent(bus.TypeRegister, "test/registrar", bus.Register{Worker: "registrar", Tools: []bus.ToolDef{{
		Name: "deploy", Description: "Deploys.", External: true, ConcurrencySafe: true, Permission: bus.PermissionAllow,
		InputSchema: json.RawMessage(`{"type":"object"}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := reg.Msg("toolbus.register")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agentNC.RequestMsg(m, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, r := range routers {
			if _, ok := r.reg.Lookup("deploy"); !ok {
				return fmt.Errorf("router %s does not know deploy yet", r.ID())
			}
		}
		return nil
	})
	agent := client.New(agentNC, client.Config{Source: "test/agent"})

	// P_parked: parks of 8 KiB inputs until one is refused.
	input := json.RawMessage(`{"x":"` + strings.Repeat("x", 8<<10) + `"}`)
	park := func(reply string) bus.Reply {
		t.Helper()
		got, err := agent.Call(t.Context(), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "deploy", Input: input}}}, client.WithReplyID(reply))
		if err != nil {
			t.Fatal(err)
		}
		return *got
	}
	var parkedReplies []string
	refused := ""
	for i := 0; refused == "" && i < 200; i++ {
		reply := fmt.Sprintf("r%d", i)
		switch got := park(reply); {
		case len(got.Parked) == 1:
			parkedReplies = append(parkedReplies, reply)
		case len(got.Results) == 1 && got.Results[0].Error != nil && got.Results[0].Error.Code == bus.CodeLimitExceeded:
			if !strings.Contains(got.Results[0].Error.Message, "could not wait for an answer: the store of waiting calls holds as much as it may") {
				t.Fatalf("the refusal: %s", got.Results[0].Error.Message)
			}
			refused = reply
		default:
			t.Fatalf("park %s: %+v", reply, got)
		}
	}
	if refused == "" || len(parkedReplies) < 3 {
		t.Fatalf("%d parks, refused %q", len(parkedReplies), refused)
	}
	if _, err := ra.parked.Read.Get(t.Context(), bus.CallKey("s1", refused, "c1")); !store.IsNotFound(err) {
		t.Fatalf("the refused call's record: %v", err)
	}
	if _, err := ra.parked.Read.Batch(t.Context(), "s1", refused); !store.IsNotFound(err) {
		t.Fatalf("the refused call's continuation: %v", err)
	}
	// A re-sent copy of a parked batch is no new park: it joins.
	if got := park(parkedReplies[0]); len(got.Parked) != 1 {
		t.Fatalf("a re-sent copy at the bound: %+v", got)
	}

	// P_sessions: sessions the agent makes up, until one is refused.
	mode := func(session, m string) error {
		return agent.Admin(t.Context(), "session.mode", session, map[string]string{"mode": m}, nil)
	}
	var sessions []string
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatal("no session refused")
		}
		id := fmt.Sprintf("made-up-%d", i)
		err := mode(id, "explore")
		if err == nil {
			sessions = append(sessions, id)
			continue
		}
		if !errors.Is(err, &bus.Error{Code: bus.CodeLimitExceeded}) || !strings.Contains(err.Error(), "No new session can be stored now") {
			t.Fatalf("session %s: %v", id, err)
		}
		break
	}
	if len(sessions) < 2 {
		t.Fatalf("%d sessions before the bound", len(sessions))
	}
	for _, id := range sessions { // every stored session is still written: its mode changes back
		if err := mode(id, "default"); err != nil {
			t.Fatalf("session %s at the bound: %v", id, err)
		}
	}

	// Every parked call ends: a third answered, a third cancelled, the rest expire.
	for i, reply := range parkedReplies {
		switch i % 3 {
		case 0:
			err = agent.Parked().Answer(t.Context(), "deploy", "s1", reply, "c1", bus.Answer{State: bus.StateSuccess, Output: bus.Text("deployed")})
		case 1:
			err = agent.Cancel(t.Context(), "s1", reply)
		}
		if err != nil {
			t.Fatalf("ending %s: %v", reply, err)
		}
	}
	want := map[int]bus.ParkStatus{0: bus.ParkDone, 1: bus.ParkCancelled, 2: bus.ParkExpired}
	ended := func(of int) error { // the calls of answers and cancels (of 2), or all (3)
		for i, reply := range parkedReplies {
			if i%3 >= of {
				continue
			}
			rec, err := ra.parked.Read.Get(t.Context(), bus.CallKey("s1", reply, "c1"))
			if err != nil {
				return err
			}
			if rec.Status != want[i%3] {
				return fmt.Errorf("%s: %s, want %s", reply, rec.Status, want[i%3])
			}
		}
		return nil
	}
	testkit.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error { return ended(2) })
	testkit.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		ra.conts.sweep(time.Now().Add(48 * time.Hour)) // the rest expire
		if err := ended(3); err != nil {
			return err
		}
		if recs, err := ra.parked.Read.FromLeader(t.Context(), "s1"); err != nil || len(recs) != 0 {
			return fmt.Errorf("%d records of s1 still waiting (%v)", len(recs), err)
		}
		return nil
	})
	t.Logf("%d parks and %d sessions before the soft bounds refused the next", len(parkedReplies), len(sessions))
	// The endings held the inputs by their digests: room again.
	testkit.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if got := park("after"); len(got.Parked) != 1 {
			return fmt.Errorf("a park after the endings: %+v", got)
		}
		return nil
	})
}
