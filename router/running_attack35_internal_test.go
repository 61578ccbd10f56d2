package router

import (
	"encoding/json"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// TestAttackNoticeListsAtMost64 (session 35, red team): a router started
// with --max-calls above 64 took a batch of 200 slow calls and listed all
// 200 ids in every notice, although 3.2.1 says at most 64 (a notice as
// large as the batch's ids, every 5 s). Now the first 64 still running.
func TestAttackNoticeListsAtMost64(t *testing.T) {
	ev := &fakeEvents{}
	n := newNotices(Notices{}, ev)
	b := &batch{}
	b.session, b.replyID = "s1", "r1"
	for i := range 200 {
		b.calls = append(b.calls, &callState{call: bus.Call{ID: fmt.Sprintf("c%03d", i)}})
	}
	b.calls[0].result = &bus.Result{ID: "c000"} // finished: not listed
	b.note.to = "_INBOX.a.b"
	n.send(b)
	if len(ev.replies) != 1 {
		t.Fatalf("%d notices", len(ev.replies))
	}
	var d struct{ Running []string }
	if err := json.Unmarshal(ev.replies[0].Data, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Running) != 64 || d.Running[0] != "c001" || d.Running[63] != "c064" {
		t.Fatalf("a notice listed %d ids: %v", len(d.Running), d.Running)
	}
}

// noticeClock records when each notice was sent, by reply id.
type noticeClock struct {
	fakeEvents
	at map[string][]time.Time
}

func (c *noticeClock) reply(_, _, _, replyID string, _ [2]string, _ json.RawMessage) error {
	c.at[replyID] = append(c.at[replyID], time.Now())
	return nil
}

// TestAttackNoticesStaggered (session 35, red team): agents holding the
// router's 4,096 slots with long batches, each taken a millisecond after
// the last, had the notices' one timer fire once per batch, every 5 s
// (4,096 fires), each walking every batch under the lock that every batch
// takes to link and unlink: 157 µs a walk measured on the loaded test
// machine, 13 % of a core and a stall of the batches' hot path 800 times
// a second. Now a fire is rounded up to a tick of Every/20 (250 ms), so
// the batches due within it share it: at most 20 fires per Every.
func TestAttackNoticesStaggered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &noticeClock{at: map[string][]time.Time{}}
		n := newNotices(Notices{}, ev)
		bs := make([]batch, 4096)
		start := time.Now()
		for i := range bs {
			bs[i].start, bs[i].replyID = start.Add(time.Duration(i)*time.Millisecond), fmt.Sprint(i)
			n.add(&bs[i], "_INBOX.a.b")
		}
		time.Sleep(12 * time.Second)
		n.stop()
		fires := map[time.Time]bool{}
		for i := range bs {
			at := ev.at[bs[i].replyID]
			if len(at) < 2 || at[0].Before(bs[i].start.Add(n.First)) || at[0].After(bs[i].start.Add(n.First+n.Every/20)) {
				t.Fatalf("batch %d (taken at +%v): notices at %v", i, bs[i].start.Sub(start), at)
			}
			for _, a := range at {
				fires[a] = true
			}
		}
		if len(fires) > 12*20/5+2 {
			t.Fatalf("%d fires in 12 s", len(fires))
		}
	})
}
