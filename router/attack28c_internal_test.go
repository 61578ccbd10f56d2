package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/replies"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/parked"
)

// BenchmarkParkedPages10k (red team 28c): the cost of the 16 pages an
// inbox reads per poll at 10,000 parked calls of 1 KiB inputs (1 MiB
// pages); parkedPage sorts every record for every page.
func BenchmarkParkedPages10k(b *testing.B) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	input, _ := json.Marshal(map[string]string{"x": strings.Repeat("x", 1<<10)})
	recs := make([]*parked.Record, 10_000)
	for i := range recs {
		recs[i] = &parked.Record{Session: fmt.Sprintf("s%d", i%50), ReplyID: fmt.Sprintf("r%d", i), Call: bus.Call{ID: "c1", Name: "ask", Input: input},
			Kind: bus.KindConfirm, Status: bus.ParkParked, Created: t0.Add(time.Duration(i%977) * time.Second), Expires: t0.Add(time.Hour), Rev: uint64(i + 1)}
	}
	for b.Loop() {
		after := parkedCursor{}
		for range 16 {
			page := parkedPage(slices.Clone(recs), after, 0, 1<<20, 0)
			if page.Next == "" {
				break
			}
			var err error
			if after, err = parseParkedCursor(page.Next); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkProgressRelayMax (red team 28c; 1.19): what the router's
// progress goroutine spends on one worker's progress of the largest size
// relayed, bus.MaxProgress bytes (decoded, checked, published again); the
// gate admits 8 at once per call, then 4 a second. Before 1.19 a progress
// of almost 1 MiB was relayed, under the reply Mux's lock (15 to 36 ms).
func BenchmarkProgressRelayMax(b *testing.B) {
	s := testkit.RunServer(b)
	nc := testkit.Connect(b, s)
	w := &wire{nc: nc, subj: bus.NewSubjects(""), source: "toolbus/router/r1", log: slog.New(slog.DiscardHandler)}
	relay := &progressRelay{wire: w, now: time.Now}
	e, err := bus.NewEvent(bus.TypeCallProgress, "toolbus/worker/evil", bus.Progress{Seq: 1, Output: bus.Text(strings.Repeat("é", 30<<10))})
	if err != nil {
		b.Fatal(err)
	}
	m, err := e.Msg("x.progress")
	if err != nil || len(m.Data) > bus.MaxProgress {
		b.Fatal(len(m.Data), err)
	}
	b.SetBytes(int64(len(m.Data)))
	for b.Loop() {
		j := &job{session: "s1", replyID: "r1", call: bus.Call{ID: "c1", Name: "t"}}
		relay.relay(j, m)
	}
}

// TestAttackProgressStallsReplies (red team 28c, closed by protocol 1.19):
// one worker holding 12 calls floods each with progress, eight events of
// almost 1 MiB (over bus.MaxProgress) and eight of 60 KiB, while the
// router's progress goroutine is stuck on the first (a stand-in for any
// slowness of the relay that holds whatever the load). Before 1.19
// progress was relayed on the one subscription every exec reply comes
// through, under its lock: another worker's reply waited behind 96 MiB of
// it (611 ms), and a longer flood could drop replies. Now the replies of
// 64 other calls, execs or not, sent after the flood, all arrive while
// the progress is still stuck; the NATS client drops the flood past the
// progress subscription's pending limits (reported), never a reply (no
// slow consumer but the progress subscription); released, the execs'
// Done return once the progress read before their replies was handled.
func TestAttackProgressStallsReplies(t *testing.T) {
	s := testkit.RunServer(t)
	slow := make(chan string, 4)
	nc := testkit.Connect(t, s, nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) && sub != nil {
			select {
			case slow <- sub.Subject:
			default:
			}
		}
	}))
	wc := testkit.Connect(t, s)
	w := &wire{nc: nc, subj: bus.NewSubjects(""), source: "toolbus/router/r1", log: slog.New(slog.DiscardHandler)}
	relay := &progressRelay{wire: w, now: time.Now}
	stuck, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var dropped atomic.Int64
	mux := replies.New(nc, replies.Options{Unguessable: true, ProgressDropped: func(n int) { dropped.Add(int64(n)) },
		Progress: func(tag any, m *nats.Msg) {
			once.Do(func() { close(stuck); <-release })
			relay.relay(tag, m)
		}})
	await := func(i int, tagged bool) *replies.Wait {
		wt, err := mux.Await(0)
		if tagged {
			wt, err = mux.AwaitTagged(&job{session: "s1", replyID: fmt.Sprintf("r%d", i), call: bus.Call{ID: "c1", Name: "t"}})
		}
		if err != nil {
			t.Fatal(err)
		}
		return wt
	}
	var held, victims []*replies.Wait
	for i := range 12 {
		held = append(held, await(i, true))
	}
	for i := range 64 {
		victims = append(victims, await(100+i, i%2 == 0))
	}
	if err := nc.Flush(); err != nil { // the Mux's subscriptions are the server's
		t.Fatal(err)
	}
	var flood []*bus.Event
	for _, text := range []string{strings.Repeat("é", 480<<10), strings.Repeat("x", 60<<10)} {
		e, err := bus.NewEvent(bus.TypeCallProgress, "toolbus/worker/evil", bus.Progress{Seq: 1, Output: bus.Text(text)})
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, e)
	}
	for range 8 {
		for _, wt := range held {
			for _, e := range flood {
				m, err := e.Msg(wt.Inbox() + bus.ProgressSuffix)
				if err != nil {
					t.Fatal(err)
				}
				if err := wc.PublishMsg(m); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	testkit.Recv(t, stuck, time.Minute, "the first progress")
	start := time.Now()
	for i, v := range victims {
		if err := wc.Publish(v.Inbox(), fmt.Appendf(nil, "reply %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range victims {
		if m := v.Wait(context.Background(), time.Minute); m == nil || string(m.Data) != fmt.Sprintf("reply %d", i) {
			t.Fatalf("reply %d behind the stuck progress: %v", i, m)
		}
	}
	t.Logf("64 replies after %v, the progress stuck", time.Since(start))
	close(release)
	start = time.Now()
	for _, v := range victims {
		mux.Done(v, true)
	}
	t.Logf("their Done after %v more", time.Since(start))
	for _, wt := range held {
		mux.Done(wt, false)
	}
	if dropped.Load() == 0 {
		t.Errorf("no progress dropped past the pending limits")
	}
	for len(slow) > 0 {
		if sub := <-slow; !strings.HasSuffix(sub, bus.ProgressSuffix) {
			t.Errorf("a slow consumer on %s", sub)
		}
	}
}

// TestAttackProgressSubjects (red team 28c): progress a worker sends
// beside the exec's own progress subject is never relayed: a subject
// nested deeper or in the middle, an inbox nobody awaits, the inbox of a
// request that is no exec; nor is a copy of a reply on the progress
// subject taken for the reply. Only <inbox>.progress of an awaited exec
// is published, and the exec's reply still ends its wait.
func TestAttackProgressSubjects(t *testing.T) {
	s := testkit.RunServer(t)
	nc, wc, watch := testkit.Connect(t, s), testkit.Connect(t, s), testkit.Connect(t, s)
	subj := bus.NewSubjects("")
	w := &wire{nc: nc, subj: subj, source: "toolbus/router/r1", log: slog.New(slog.DiscardHandler)}
	relay := &progressRelay{wire: w, now: time.Now}
	mux := replies.New(nc, replies.Options{EndOnClose: true, Unguessable: true, Progress: relay.relay})
	events, err := watch.SubscribeSync(subj.All("events"))
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	exec, err := mux.AwaitTagged(&job{session: "s1", replyID: "r1", call: bus.Call{ID: "c1", Name: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := mux.Await(0) // a request that is no exec: no tag
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the Mux's subscription is the server's
		t.Fatal(err)
	}
	send := func(subject string, seq int, text string) {
		e, err := bus.NewEvent(bus.TypeCallProgress, "toolbus/worker/evil", bus.Progress{Seq: seq, Output: bus.Text(text)})
		if err != nil {
			t.Fatal(err)
		}
		m, err := e.Msg(subject)
		if err != nil {
			t.Fatal(err)
		}
		if err := wc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	prefix := exec.Inbox()[:strings.LastIndexByte(exec.Inbox(), '.')+1]
	send(exec.Inbox()+bus.ProgressSuffix+".x", 1, "nested")
	send(exec.Inbox()+".x"+bus.ProgressSuffix, 2, "middle")
	send(exec.Inbox()+bus.ProgressSuffix+bus.ProgressSuffix, 3, "twice")
	send(prefix+"0"+bus.ProgressSuffix, 4, "nobody's")
	send(other.Inbox()+bus.ProgressSuffix, 5, "no exec")
	send(exec.Inbox()+bus.ProgressSuffix, 6, "mine")
	if err := wc.Publish(other.Inbox(), []byte("other's reply")); err != nil {
		t.Fatal(err)
	}
	if err := wc.Publish(exec.Inbox(), []byte("exec's reply")); err != nil {
		t.Fatal(err)
	}
	for _, wt := range []*replies.Wait{other, exec} {
		if m := wt.Wait(context.Background(), 10*time.Second); m == nil || !strings.HasSuffix(string(m.Data), "reply") {
			t.Fatalf("a wait's reply: %v", m)
		}
		mux.Done(wt, true) // the exec's once the progress sent before its reply was handled
	}
	var got []string
	for _, m := range relayed(t, nc, events, subj) {
		var p bus.Progress
		if e, err := bus.Decode(m); err != nil || e.DataAs(&p) != nil {
			t.Fatalf("published %s: %v", m.Data, err)
		}
		got = append(got, textOf(p.Output))
	}
	if strings.Join(got, " ") != "mine" {
		t.Fatalf("published %q, want only mine", got)
	}
}
