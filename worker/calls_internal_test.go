package worker

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// callTable is tested alone here, without a server.

func cancelMsg(t *testing.T, subject, replyID string, calls ...string) *nats.Msg {
	t.Helper()
	e, err := bus.NewEvent(bus.TypeCallCancel, "test", bus.Cancel{Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	e.ReplyID = replyID
	m, err := e.Msg(subject)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCallTableQueued(t *testing.T) {
	ct := newCallTable(bus.NewSubjects(""))
	ct.queue("s.r.a", "t1")
	ct.queue("s.r.b", "t1")
	ct.queue("s.r.c", "t2")
	ct.unqueue("s.r.b")
	ct.unqueue("s.r.none")
	got := ct.queuedByTool()
	if ct.queuedLen() != 2 || !slices.Equal(got["t1"], []string{"s.r.a"}) || !slices.Equal(got["t2"], []string{"s.r.c"}) {
		t.Fatalf("queued %v (%d)", got, ct.queuedLen())
	}
}

// TestCallTableLinger: an answered call stays listed for linger (its
// reply may still be on its way to the router), then is listed no more; a
// call queued again is listed once.
func TestCallTableLinger(t *testing.T) {
	ct := newCallTable(bus.NewSubjects(""))
	ct.linger = time.Hour
	ct.queue("s.r.a", "t1")
	ct.queue("s.r.b", "t1")
	ct.unqueue("s.r.b")
	if got := ct.queuedByTool()["t1"]; ct.queuedLen() != 1 || !slices.Equal(sorted(got), []string{"s.r.a", "s.r.b"}) {
		t.Fatalf("listed %v, %d queued", got, ct.queuedLen())
	}
	ct.queue("s.r.b", "t1")
	if got := ct.queuedByTool()["t1"]; !slices.Equal(sorted(got), []string{"s.r.a", "s.r.b"}) {
		t.Fatalf("queued again: listed %v", got)
	}
	ct.unqueue("s.r.b")
	ct.mu.Lock()
	ct.answered.newestFirst(func(a *answered) bool {
		if a.key == "s.r.b" {
			a.at = time.Now().Add(-2 * time.Hour)
		}
		return true
	})
	ct.mu.Unlock()
	if got := ct.queuedByTool()["t1"]; !slices.Equal(got, []string{"s.r.a"}) {
		t.Fatalf("after linger: listed %v", got)
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

func TestCallTableCancel(t *testing.T) {
	type call struct{ session, reply, id string }
	for _, tc := range []struct {
		name      string
		running   []call
		msg       func(t *testing.T) *nats.Msg
		cancelled []string // running calls whose context was cancelled
		later     call     // a request that arrives after the cancel
		laterCut  bool
	}{
		{"one call", []call{{"s1", "r1", "a"}, {"s1", "r1", "b"}},
			func(t *testing.T) *nats.Msg { return cancelMsg(t, "toolbus.cancel.s1", "r1", "a") },
			[]string{"a"}, call{"s1", "r1", "c"}, false},
		{"the whole reply", []call{{"s1", "r1", "a"}, {"s1", "r2", "b"}},
			func(t *testing.T) *nats.Msg { return cancelMsg(t, "toolbus.cancel.s1", "r1") },
			[]string{"a"}, call{"s1", "r1", "c"}, true},
		{"overtaken request", nil,
			func(t *testing.T) *nats.Msg { return cancelMsg(t, "toolbus.cancel.s1", "r1", "x") },
			nil, call{"s1", "r1", "x"}, true},
		{"another session", []call{{"s1", "r1", "a"}},
			func(t *testing.T) *nats.Msg { return cancelMsg(t, "toolbus.cancel.s2", "r1") },
			nil, call{"s1", "r1", "b"}, false},
		{"not a cancel subject", []call{{"s1", "r1", "a"}},
			func(t *testing.T) *nats.Msg { return cancelMsg(t, "toolbus.cancel.s1.more", "r1") },
			nil, call{"s1", "r1", "b"}, false},
		{"no reply id", []call{{"s1", "r1", "a"}},
			func(t *testing.T) *nats.Msg { return cancelMsg(t, "toolbus.cancel.s1", "") },
			nil, call{"s1", "r1", "b"}, false},
		{"a reply id no call has", []call{{"s1", "r1", "a"}},
			func(t *testing.T) *nats.Msg { return cancelMsg(t, "toolbus.cancel.s1", "r 1") },
			nil, call{"s1", "r1", "b"}, false},
		{"garbage", []call{{"s1", "r1", "a"}},
			func(*testing.T) *nats.Msg { return &nats.Msg{Subject: "toolbus.cancel.s1", Data: []byte("{")} },
			nil, call{"s1", "r1", "b"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := newCallTable(bus.NewSubjects(""))
			var running []*Call
			for _, c := range tc.running {
				call := &Call{ID: c.id, SessionID: c.session, ReplyID: c.reply}
				if ct.begin(bus.CallKey(c.session, c.reply, c.id), call) {
					t.Fatalf("call %s cancelled before any cancel", c.id)
				}
				running = append(running, call)
			}
			ct.onCancel(tc.msg(t))
			var got []string
			for _, c := range running {
				if c.cancelled.Load() {
					got = append(got, c.ID)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.cancelled) {
				t.Fatalf("cancelled %v, want %v", got, tc.cancelled)
			}
			l := &Call{ID: tc.later.id, SessionID: tc.later.session, ReplyID: tc.later.reply}
			key := bus.CallKey(l.SessionID, l.ReplyID, l.ID)
			if cut := ct.begin(key, l); cut != tc.laterCut {
				t.Fatalf("a later request cut off: %v, want %v", cut, tc.laterCut)
			}
			ct.end(key, &Call{})
			if ct.inflight[key] != l {
				t.Fatal("end of another call unlisted this one")
			}
			ct.end(key, l)
			if _, ok := ct.inflight[key]; ok {
				t.Fatal("end left the call listed")
			}
		})
	}
}

// TestCallTableAnsweredBound: a busy worker's beat lists at most
// maxAnswered answered calls, the newest, however many it answered within
// linger; calls still queued are all listed.
func TestCallTableAnsweredBound(t *testing.T) {
	ct := newCallTable(bus.NewSubjects(""))
	ct.linger = time.Hour
	ct.queue("s.r.q", "t1")
	base := time.Now().Add(-time.Minute)
	ct.mu.Lock()
	for i := range maxAnswered + 500 {
		ct.answered.add(answered{key: fmt.Sprintf("s.r.%d", i), tool: "t1", at: base.Add(time.Duration(i) * time.Millisecond)})
	}
	ct.mu.Unlock()
	got := ct.queuedByTool()["t1"]
	if len(got) != maxAnswered+1 || !slices.Contains(got, "s.r.q") {
		t.Fatalf("listed %d keys (queued listed: %v), want %d", len(got), slices.Contains(got, "s.r.q"), maxAnswered+1)
	}
	if slices.Contains(got, "s.r.499") || !slices.Contains(got, "s.r.500") || !slices.Contains(got, fmt.Sprintf("s.r.%d", maxAnswered+499)) {
		t.Fatal("the oldest answered calls were not the ones dropped")
	}
}

// TestAnsweredRing: the ring keeps the last maxAnswered answers and
// gives them newest first, before and after it wraps.
func TestAnsweredRing(t *testing.T) {
	for _, n := range []int{0, 1, 5, maxAnswered - 1, maxAnswered, maxAnswered + 1, 3*maxAnswered + 7} {
		var r answeredRing
		for i := range n {
			r.add(answered{key: fmt.Sprint(i)})
		}
		var got []string
		r.newestFirst(func(a *answered) bool { got = append(got, a.key); return true })
		want := []string{}
		for i := n - 1; i >= 0 && i >= n-maxAnswered; i-- {
			want = append(want, fmt.Sprint(i))
		}
		if len(got) != len(want) || len(got) > 0 && (got[0] != want[0] || got[len(got)-1] != want[len(want)-1]) || !slices.Equal(got, want) {
			t.Errorf("%d answers: got %d, newest %v, want %d", n, len(got), got[:min(3, len(got))], len(want))
		}
		stopped := 0
		r.newestFirst(func(*answered) bool { stopped++; return false })
		if n > 0 && stopped != 1 {
			t.Errorf("%d answers: %d calls after false", n, stopped)
		}
	}
}

// A worker remembers at most maxCancels cancels, valid ids only, and forgets
// the oldest first (by age, or past the bound); a key cancelled again is
// remembered from its latest cancel.
func TestCallTableCancelMemory(t *testing.T) {
	ct := newCallTable(bus.NewSubjects(""))
	ids := make([]string, maxCancels+10)
	for i := range ids {
		ids[i] = fmt.Sprintf("c%d", i)
	}
	ids = append(ids, "not valid", "x.y")
	for chunk := range slices.Chunk(ids, bus.MaxCancelCalls) { // a cancel names at most MaxCancelCalls
		ct.onCancel(cancelMsg(t, "toolbus.cancel.s1", "r1", chunk...))
	}
	if len(ct.cancelled) != maxCancels || len(ct.order) != maxCancels {
		t.Fatalf("remembers %d keys (%d in order), want %d", len(ct.cancelled), len(ct.order), maxCancels)
	}
	for _, tc := range []struct {
		id  string
		cut bool
	}{{"c0", false}, {"c9", false}, {"c10", true}, {fmt.Sprintf("c%d", maxCancels+9), true}} {
		if cut := ct.begin(bus.CallKey("s1", "r1", tc.id), &Call{ID: tc.id, SessionID: "s1", ReplyID: "r1"}); cut != tc.cut {
			t.Errorf("request %s cut off: %v, want %v", tc.id, cut, tc.cut)
		}
	}
	// Age: the cancels of a moment past cancelMemory go at the next one; a
	// key cancelled again since stays.
	ct.mu.Lock()
	old := time.Now().Add(-cancelMemory - time.Second)
	for i := range ct.order {
		ct.order[i].at = old
		ct.cancelled[ct.order[i].key] = seenCancel{at: old}
	}
	ct.mu.Unlock()
	ct.onCancel(cancelMsg(t, "toolbus.cancel.s1", "r1", "c10"))
	if len(ct.cancelled) != 1 || len(ct.order) != 1 {
		t.Fatalf("after cancelMemory: %d keys (%d in order), want 1", len(ct.cancelled), len(ct.order))
	}
	if _, ok := ct.cancelled[bus.CallKey("s1", "r1", "c10")]; !ok {
		t.Fatal("the key cancelled again was forgotten")
	}
	// A cancel past cancelMemory cuts no request off, though no cancel came
	// since to forget it: a batch re-sent later under its reply id runs.
	ct.mu.Lock()
	ct.order[0].at = old
	ct.cancelled[ct.order[0].key] = seenCancel{at: old}
	ct.mu.Unlock()
	if ct.begin(bus.CallKey("s1", "r1", "c10"), &Call{ID: "c10", SessionID: "s1", ReplyID: "r1"}) {
		t.Fatal("a cancel older than cancelMemory cut a request off")
	}
}

// maxCancel is a cancel of the server's max payload (1 MiB), all short ids:
// what any agent may send to every worker.
func maxCancel(t testing.TB) *nats.Msg {
	ids := make([]string, 0, 100_000)
	for i := 0; len(ids) < cap(ids); i++ {
		ids = append(ids, fmt.Sprintf("c%d", i))
	}
	e, err := bus.NewEvent(bus.TypeCallCancel, "test", bus.Cancel{Calls: ids})
	if err != nil {
		t.Fatal(err)
	}
	e.ReplyID = "r1"
	m, err := e.Msg("toolbus.cancel.s1")
	if err != nil || len(m.Data) > 1<<20 {
		t.Fatalf("%d bytes: %v", len(m.Data), err)
	}
	return m
}

// Attack (session 40, cancelbound40): a cancel naming more than
// bus.MaxCancelCalls ids, or under a session or reply id no call may have,
// is dropped whole: no key remembered (none of the worker's memory of real
// cancels pushed out), no call stopped. Before, one 1 MiB cancel wrote 65,536
// keys and evicted every real cancel the worker remembered.
func TestAttackCancelBound(t *testing.T) {
	ct := newCallTable(bus.NewSubjects(""))
	ct.onCancel(cancelMsg(t, "toolbus.cancel.s1", "r1", "real"))
	running := &Call{ID: "c5", SessionID: "s1", ReplyID: "r1"}
	ct.begin(bus.CallKey("s1", "r1", "c5"), running)
	over := make([]string, bus.MaxCancelCalls+1)
	for i := range over {
		over[i] = fmt.Sprintf("c%d", i)
	}
	long := strings.Repeat("s", 129)
	for name, m := range map[string]*nats.Msg{
		"max payload":       maxCancel(t),
		"one id over":       cancelMsg(t, "toolbus.cancel.s1", "r1", over...),
		"session too long":  cancelMsg(t, "toolbus.cancel."+long, "r1", "c5"),
		"reply id too long": cancelMsg(t, "toolbus.cancel.s1", long, "c5"),
	} {
		ct.onCancel(m)
		if len(ct.cancelled) != 1 || len(ct.order) != 1 || running.cancelled.Load() {
			t.Errorf("%s: %d keys remembered (want 1, the real cancel's), call stopped %v", name, len(ct.cancelled), running.cancelled.Load())
		}
	}
	ct.onCancel(cancelMsg(t, "toolbus.cancel.s1", "r1", over[:bus.MaxCancelCalls]...))
	if len(ct.cancelled) != 1+bus.MaxCancelCalls {
		t.Errorf("a cancel at the bound: %d keys remembered, want %d", len(ct.cancelled), 1+bus.MaxCancelCalls)
	}
}

// BenchmarkCancelMax: one worker's cost of a max-payload cancel (1 MiB of
// short ids, from any session's agent).
func BenchmarkCancelMax(b *testing.B) {
	ct := newCallTable(bus.NewSubjects(""))
	m := maxCancel(b)
	b.SetBytes(int64(len(m.Data)))
	for b.Loop() {
		ct.onCancel(m)
	}
}
