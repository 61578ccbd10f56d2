package embedded

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// lostPullBound is how soon a follower whose first pull was lost must
// deliver: well under followWait+followGrace (15 s, what a follower waited
// before protocol 1.9's heartbeats), well over followQuiet (2 s).
const lostPullBound = 7 * time.Second

// dropHop stands between a client with prefix "hop" and the routers
// (prefix "toolbus"): it forwards what the client sends on hop.replay.>
// and hop.handoff.> to the same subject under toolbus, with the client's
// reply subject, except the first io.toolbus.consumer.next on each
// subject, which it drops. That is what a relayed pull nobody receives
// looks like from the follower: a router relays the pull to
// $JS.API.CONSUMER.MSG.NEXT with the follower's reply subject before the
// consumer leader's interest reached the router's server (a consumer
// seconds old on a cluster), and nats-server answers "no responders" only
// to the publisher's own subscription (TestRelayedPullToNoInterestIsSilent):
// nothing comes back, not even a status.
type dropHop struct {
	mu      sync.Mutex
	dropped map[string]int // consumer.next dropped per subject
}

func startDropHop(t *testing.T, e *env) *dropHop {
	t.Helper()
	h := &dropHop{dropped: map[string]int{}}
	nc := e.connect(t)
	forward := func(m *nats.Msg) {
		if ev, err := bus.Decode(m); err == nil && ev.Type == bus.TypeConsumerNext {
			h.mu.Lock()
			first := h.dropped[m.Subject] == 0
			if first {
				h.dropped[m.Subject]++
			}
			h.mu.Unlock()
			if first {
				return
			}
		}
		out := &nats.Msg{Subject: "toolbus." + strings.TrimPrefix(m.Subject, "hop."), Reply: m.Reply, Header: m.Header, Data: m.Data}
		if err := nc.PublishMsg(out); err != nil {
			t.Errorf("hop: %v", err)
		}
	}
	for _, s := range []string{"hop.replay.>", "hop.handoff.>"} {
		if _, err := nc.Subscribe(s, forward); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *dropHop) drops(subject string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dropped[subject]
}

// TestFollowerRecoversLostPull: a follower (Client.Replay, Parked().Follow)
// whose first relayed pull is lost on its way delivers within a few
// seconds: it asked for heartbeats (io.toolbus.consumer.next heartbeat_ms,
// protocol 1.9), heard none within two, and pulled again. Before, it waited
// for a closing status for the wait plus 10 s (15 s) and then asked for a
// new consumer (TestOnCluster/ExternalToolParkAndAnswer failed so).
func TestFollowerRecoversLostPull(t *testing.T) {
	e := newEnv(t, 1)
	e.registerDefs(t, bus.ToolDef{Name: "pick_lost", External: true})
	hop := startDropHop(t, e)
	agent := client.New(e.connect(t), client.Config{Prefix: "hop", Source: "test/hop"})

	t.Run("replay", func(t *testing.T) {
		const session = "lost-pull-1"
		reply := e.call(t, session, []bus.Call{{ID: "c1", Name: "no_such_tool", Input: json.RawMessage(`{}`)}})
		if len(reply.Results) != 1 {
			t.Fatalf("reply %s", jsonOf(reply))
		}
		start := time.Now()
		ev, err := agent.Replay(testCtx(t), session)
		if err != nil {
			t.Fatal(err)
		}
		defer ev.Stop(t.Context())
		got := firstWithin(t, ev, lostPullBound)
		t.Logf("first event %s after %v; pulls dropped %d", got.Type, time.Since(start).Round(time.Millisecond), hop.drops("hop.replay."+session))
		if got.Type != bus.TypeBatchDone || got.SessionID != session {
			t.Fatalf("replayed %s of %s", got.Type, got.SessionID)
		}
		if n := hop.drops("hop.replay." + session); n != 1 {
			t.Fatalf("the hop dropped %d pulls, want 1", n)
		}
	})

	t.Run("handoff", func(t *testing.T) {
		r := e.callParked(t, "lost-pull-2", "r1", bus.Call{ID: "c1", Name: "pick_lost", Input: json.RawMessage(`{"q":"x"}`)})
		if len(r.Parked) != 1 {
			t.Fatalf("reply %s", jsonOf(r))
		}
		start := time.Now()
		ev, err := agent.Parked().Follow(testCtx(t), bus.KindExternal, "pick_lost")
		if err != nil {
			t.Fatal(err)
		}
		defer ev.Stop(t.Context())
		got := firstWithin(t, ev, lostPullBound)
		t.Logf("first request after %v", time.Since(start).Round(time.Millisecond))
		if got.Type != bus.TypeExternalReq || got.ToolCallID != "c1" {
			t.Fatalf("handoff sent %s for %s", got.Type, got.ToolCallID)
		}
		if n := hop.drops("hop.handoff.external.pick_lost"); n != 1 {
			t.Fatalf("the hop dropped %d pulls, want 1", n)
		}
	})
}

// firstWithin is ev's first event, failing the test after d.
func firstWithin(t *testing.T, ev *client.Events, d time.Duration) *bus.Event {
	t.Helper()
	select {
	case x, ok := <-ev.C:
		if !ok {
			t.Fatal("the stream ended")
		}
		return x
	case <-time.After(d):
		t.Fatalf("nothing within %v", d)
	}
	return nil
}

// TestRelayedPullToNoInterestIsSilent shows the mechanism behind a lost
// pull (nats-server 2.15's processMsgResults: the 503 "no responders"
// status goes only to a subscription of the publisher itself): a pull
// published to $JS.API.CONSUMER.MSG.NEXT where no consumer listens, with
// the publisher's own inbox as reply, is answered 503; with another
// connection's inbox as reply, as a router relays it, nothing at all
// comes there. The marker published after it on the same connection
// arrives first and alone (one server: in order).
func TestRelayedPullToNoInterestIsSilent(t *testing.T) {
	e := newEnv(t, 1)
	relay, follower := e.connect(t), e.connect(t)
	next := "$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_EVENTS.replay-nobodylistenshere"
	pull := []byte(`{"batch":1,"expires":1000000000}`)

	own, err := relay.Request(next, pull, bound)
	if err == nil || !strings.Contains(err.Error(), "no responders") {
		t.Fatalf("a pull with the publisher's own reply: %v %v, want no responders", own, err)
	}

	inbox := follower.NewInbox()
	sub, err := follower.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := follower.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := relay.PublishMsg(&nats.Msg{Subject: next, Reply: inbox, Data: pull}); err != nil {
		t.Fatal(err)
	}
	if err := relay.PublishMsg(&nats.Msg{Subject: inbox, Data: []byte("marker")}); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(bound)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "marker" || m.Header.Get("Status") != "" {
		t.Fatalf("the follower's inbox got %q %v before the marker, want nothing", m.Data, m.Header)
	}
}
