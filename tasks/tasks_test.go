package tasks_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/tasks"
)

func newStore(t *testing.T, cfg tasks.Config) *tasks.Store {
	t.Helper()
	return tasks.New(newKV(t), cfg)
}

func newKV(t *testing.T) jetstream.KeyValue {
	t.Helper()
	nc := testkit.Connect(t, testkit.RunServer(t))
	js := testkit.JetStream(t, nc)
	kv, err := tasks.Setup(t.Context(), js, bus.NewSubjects(""), 1, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func rec(session, id, user string, deadline time.Time) *tasks.Record {
	r := &tasks.Record{Task: bus.Task{ID: id, Session: session, ReplyID: "r", CallID: "c-" + id, Tool: "t",
		State: bus.StateBackground, Started: time.Now(), Deadline: deadline}, Owner: "a", Lease: time.Now().Add(time.Minute)}
	if user != "" {
		r.UserKey = tasks.UserKey([]byte(`"` + user + `"`))
	}
	return r
}

func isCode(err error, code string) bool { return errors.Is(err, &bus.Error{Code: code}) }

// TestBounds: the session's and the user's bounds refuse the next task and
// store nothing; an end frees the slot; a count past its deadline lapses.
func TestBounds(t *testing.T) {
	st := newStore(t, tasks.Config{MaxPerSession: 2, MaxPerUser: 3})
	ctx := t.Context()
	later := time.Now().Add(time.Hour)
	steps := []struct {
		name    string
		r       *tasks.Record
		refused bool
	}{
		{"first", rec("s1", "a1", "u", later), false},
		{"second", rec("s1", "a2", "u", later), false},
		{"the session's bound", rec("s1", "a3", "u", later), true},
		{"another session", rec("s2", "b1", "u", later), false},
		{"the user's bound", rec("s3", "c1", "u", later), true},
		{"no user: only the session's bound", rec("s3", "c2", "", later), false},
		{"a lapsed count does not hold a slot", rec("s4", "d1", "", time.Now().Add(-time.Second)), false},
		{"after the lapsed one", rec("s4", "d2", "", later), false},
		{"a second live one in s4", rec("s4", "d3", "", later), false},
		{"a third live one in s4", rec("s4", "d4", "", later), true},
	}
	for _, s := range steps {
		_, _, err := st.Admit(ctx, s.r)
		if s.refused != isCode(err, bus.CodeLimitExceeded) || (!s.refused && err != nil) {
			t.Fatalf("%s: %v", s.name, err)
		}
		if _, gerr := st.Get(ctx, s.r.Session, s.r.ID); s.refused != isCode(gerr, bus.CodeUnknownTask) {
			t.Fatalf("%s: stored although refused, or missing: %v", s.name, gerr)
		}
	}
	if _, ended, err := st.Finish(ctx, "s1", "a1", bus.Result{ID: "c-a1", Name: "t", State: bus.StateSuccess}); err != nil || !ended {
		t.Fatalf("finish: %v %v", ended, err)
	}
	if _, _, err := st.Admit(ctx, rec("s1", "a4", "u", later)); err != nil {
		t.Fatalf("a slot freed by an end: %v", err)
	}
}

// TestFirstEndKept: a cancel after the end, or an end after a cancel,
// changes nothing; another session's task is unknown to every verb.
func TestFirstEndKept(t *testing.T) {
	st := newStore(t, tasks.Config{})
	ctx := t.Context()
	if _, _, err := st.Admit(ctx, rec("s1", "k1", "", time.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	r, ended, err := st.Cancel(ctx, "s1", "k1")
	if err != nil || !ended || r.State != bus.StateInterrupted {
		t.Fatalf("cancel: %v %v %+v", ended, err, r)
	}
	r, ended, err = st.Finish(ctx, "s1", "k1", bus.Result{State: bus.StateSuccess})
	if err != nil || ended || r.State != bus.StateInterrupted {
		t.Fatalf("a late end: %v %v %+v", ended, err, r)
	}
	for name, f := range map[string]func() error{
		"get":    func() error { _, err := st.Get(ctx, "s2", "k1"); return err },
		"cancel": func() error { _, _, err := st.Cancel(ctx, "s2", "k1"); return err },
		"wait":   func() error { _, err := st.Wait(ctx, "s2", []string{"k1"}, false); return err },
		"bad id": func() error { _, err := st.Get(ctx, "s1", "a.b"); return err },
	} {
		if err := f(); !isCode(err, bus.CodeUnknownTask) {
			t.Errorf("%s from another session: %v", name, err)
		}
	}
	if l, err := st.List(ctx, "s2"); err != nil || len(l) != 0 {
		t.Fatalf("list of another session: %v %+v", err, l)
	}
}

// TestWaitOfZeroPolls: a wait whose deadline has passed before it starts
// (a busy server, or a wait of 0) answers with the tasks' states, as a
// poll, instead of failing with its deadline.
func TestWaitOfZeroPolls(t *testing.T) {
	st := newStore(t, tasks.Config{})
	if _, _, err := st.Admit(t.Context(), rec("s1", "z1", "", time.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	over, cancel := context.WithCancel(t.Context())
	cancel()
	got, err := st.Wait(over, "s1", []string{"z1"}, false)
	if err != nil || len(got) != 1 || got[0].State != bus.StateBackground {
		t.Fatalf("a wait past its deadline: %v %+v", err, got)
	}
	if _, err := st.Wait(over, "s1", []string{"nope"}, false); err == nil {
		t.Fatal("an unknown id past the deadline: no error")
	}
}

// TestWaitAndClaim: a wait returns when its tasks end (any: the first),
// or at its context's end; a claim takes only a task whose lease ran out,
// and the old owner's renewal then fails.
func TestWaitAndClaim(t *testing.T) {
	st := newStore(t, tasks.Config{})
	ctx := t.Context()
	later := time.Now().Add(time.Hour)
	for _, id := range []string{"w1", "w2"} {
		if _, _, err := st.Admit(ctx, rec("s1", id, "", later)); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	got, err := st.Wait(short, "s1", []string{"w1", "w2"}, false)
	cancel()
	if err != nil || got[0].State != bus.StateBackground {
		t.Fatalf("a wait at its deadline: %v %+v", err, got)
	}
	done := make(chan []*tasks.Record, 1)
	go func() {
		r, _ := st.Wait(ctx, "s1", []string{"w1", "w2"}, true)
		done <- r
	}()
	if _, _, err := st.Finish(ctx, "s1", "w2", bus.Result{State: bus.StateSuccess}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r[1].State != bus.StateSuccess || r[0].State != bus.StateBackground {
			t.Fatalf("wait any: %+v %+v", r[0], r[1])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wait any did not return")
	}

	now := time.Now()
	if _, ok, err := st.Claim(ctx, "s1", "w1", "b", now, now.Add(time.Minute)); err != nil || ok {
		t.Fatalf("claimed a task whose lease holds: %v %v", ok, err)
	}
	if _, ok, err := st.Claim(ctx, "s1", "w1", "b", now.Add(2*time.Minute), now.Add(3*time.Minute)); err != nil || !ok {
		t.Fatalf("claim after the lease: %v %v", ok, err)
	}
	if held, err := st.Renew(ctx, "s1", "w1", "a", now.Add(time.Hour)); err != nil || held {
		t.Fatalf("the old owner renewed: %v %v", held, err)
	}
	running, err := st.Running(ctx)
	if err != nil || len(running) != 1 || running[0].ID != "w1" || running[0].Owner != "b" {
		t.Fatalf("running: %v %+v", err, running)
	}
}

// TestWaitNotHeldByWatchStop: a wait answers without waiting for its
// watch's stop, a consumer delete that takes up to 5 s on a cluster (held
// here at a gate); Stop waits for it.
func TestWaitNotHeldByWatchStop(t *testing.T) {
	gate := testkit.GateStops(newKV(t))
	t.Cleanup(gate.Open)
	st := tasks.New(gate, tasks.Config{})
	ctx := t.Context()
	if _, _, err := st.Admit(ctx, rec("s1", "g1", "", time.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Finish(ctx, "s1", "g1", bus.Result{State: bus.StateSuccess}); err != nil {
		t.Fatal(err)
	}
	done := make(chan []*tasks.Record, 1)
	go func() {
		r, _ := st.Wait(ctx, "s1", []string{"g1"}, false)
		done <- r
	}()
	if r := testkit.Recv(t, done, 10*time.Second, "the wait's answer, its watch's stop held"); len(r) != 1 || r[0].State != bus.StateSuccess {
		t.Fatalf("wait: %+v", r)
	}
	testkit.Recv(t, gate.Stopping, 10*time.Second, "the watch's stop")
	over, cancel := context.WithCancel(ctx)
	cancel()
	if err := st.Stop(over); err == nil {
		t.Fatal("Stop returned nil with a stop in flight")
	}
	gate.Open()
	if err := st.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, gate.Stopped, 10*time.Second, "the watch's stop returned")
}

// TestID: a call's task id is the same for every copy of the call, a valid
// id, and another for another session, batch or call.
func TestID(t *testing.T) {
	id := tasks.ID("s1", "r1", "c1")
	if !bus.ValidID(id) || id != tasks.ID("s1", "r1", "c1") {
		t.Fatalf("id %q: not valid or not stable", id)
	}
	for _, other := range [][3]string{{"s2", "r1", "c1"}, {"s1", "r2", "c1"}, {"s1", "r1", "c2"}, {"s1", "r1c", "1"}} {
		if tasks.ID(other[0], other[1], other[2]) == id {
			t.Errorf("%v has the id of s1/r1/c1", other)
		}
	}
}

// barrierKV holds the first two creates of task records until both have
// arrived: two copies of a call that both passed Admit's look for a task.
type barrierKV struct {
	jetstream.KeyValue
	mu      sync.Mutex
	arrived int
	both    chan struct{}
}

func (b *barrierKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if strings.HasPrefix(key, "t.") {
		b.mu.Lock()
		b.arrived++
		if b.arrived == 2 {
			close(b.both)
		}
		wait := b.arrived <= 2
		b.mu.Unlock()
		if wait {
			select {
			case <-b.both:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
	return b.KeyValue.Create(ctx, key, value, opts...)
}

// TestAdmitCopies: two copies of a call admitted at once (both past the
// look for a task, their creates racing) make one task: exactly one
// creates it, the other gets it; the bounds count it once, so neither is
// refused at a bound of 1 and an end frees the slot. A copy after the end
// gets the ended task, even with the session's bound full, and counts
// nothing.
func TestAdmitCopies(t *testing.T) {
	kv := &barrierKV{KeyValue: newKV(t), both: make(chan struct{})}
	st := tasks.New(kv, tasks.Config{MaxPerSession: 1, MaxPerUser: 1})
	ctx := t.Context()
	later := time.Now().Add(time.Hour)
	id := tasks.ID("s1", "r1", "c1")
	type admitted struct {
		got     *tasks.Record
		created bool
		err     error
	}
	out := make(chan admitted, 2)
	for _, owner := range []string{"a", "b"} {
		r := rec("s1", id, "u", later)
		r.Owner = owner
		go func() {
			got, created, err := st.Admit(ctx, r)
			out <- admitted{got, created, err}
		}()
	}
	var created int
	var owners []string
	for range 2 {
		a := testkit.Recv(t, out, 10*time.Second, "an admit")
		if a.err != nil || a.got == nil || a.got.ID != id {
			t.Fatalf("admit: %v %+v", a.err, a.got)
		}
		if a.created {
			created++
		}
		owners = append(owners, a.got.Owner)
	}
	if created != 1 || owners[0] != owners[1] {
		t.Fatalf("created %d times; the copies got the tasks of %v", created, owners)
	}
	if list, err := st.List(ctx, "s1"); err != nil || len(list) != 1 {
		t.Fatalf("tasks: %v %+v", err, list)
	}
	if _, _, err := st.Admit(ctx, rec("s1", "other1", "", later)); !isCode(err, bus.CodeLimitExceeded) {
		t.Fatalf("the session's bound of 1 with the task running: %v", err)
	}
	if _, ended, err := st.Finish(ctx, "s1", id, bus.Result{State: bus.StateSuccess}); err != nil || !ended {
		t.Fatalf("finish: %v %v", ended, err)
	}
	if _, created, err := st.Admit(ctx, rec("s1", "other2", "u", later)); err != nil || !created {
		t.Fatalf("the slot after the end: %v %v", created, err)
	}
	// The session's and the user's bounds are full now; a late copy of the
	// ended task gets it and is not refused.
	late := rec("s1", id, "u", later)
	got, created2, err := st.Admit(ctx, late)
	if err != nil || created2 || got.State != bus.StateSuccess {
		t.Fatalf("a copy after the end: %v %v %+v", err, created2, got)
	}
	if _, ended, err := st.Finish(ctx, "s1", "other2", bus.Result{State: bus.StateSuccess}); err != nil || !ended {
		t.Fatalf("finish: %v %v", ended, err)
	}
	if _, created, err := st.Admit(ctx, rec("s1", "other3", "u", later)); err != nil || !created {
		t.Fatalf("the late copy held a count: %v %v", created, err)
	}
}

// TestListWhileRenewed: a listing holds every task of the session while
// their records are rewritten (a running task's lease is, every
// heartbeat). A key listing (ListKeysFiltered) left one out now and then:
// 17 of 500 lists with two tasks renewed in a loop, and test/embedded
// TestTaskTools's list_tasks showed one of its two tasks under load.
func TestListWhileRenewed(t *testing.T) {
	st := newStore(t, tasks.Config{})
	ctx := t.Context()
	later := time.Now().Add(time.Hour)
	ids := []string{"a1", "a2", "a3"}
	for _, id := range ids {
		if _, _, err := st.Admit(ctx, rec("s1", id, "", later)); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, id := range ids {
				if _, err := st.Renew(ctx, "s1", id, "a", time.Now().Add(time.Minute)); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	defer wg.Wait()
	defer close(stop)
	for i := range 300 {
		got, err := st.List(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ids) {
			t.Fatalf("list %d while the tasks are renewed: %d tasks, want %d", i, len(got), len(ids))
		}
	}
}

// TestSharedAgentBound: tasks counted under tasks.SharedKey (the shared
// agent's sessions, bound to no user, on a router with identities) share
// the user's bound over every session: a new session does not lift it.
func TestSharedAgentBound(t *testing.T) {
	st := newStore(t, tasks.Config{MaxPerSession: 8, MaxPerUser: 2})
	ctx := t.Context()
	later := time.Now().Add(time.Hour)
	shared := func(session, id string) *tasks.Record {
		r := rec(session, id, "", later)
		r.UserKey = tasks.SharedKey
		return r
	}
	for _, r := range []*tasks.Record{shared("x1", "a1"), shared("x2", "a2")} {
		if _, created, err := st.Admit(ctx, r); err != nil || !created {
			t.Fatalf("admit %s: %v %v", r.ID, created, err)
		}
	}
	_, _, err := st.Admit(ctx, shared("x3", "a3"))
	if !isCode(err, bus.CodeLimitExceeded) || !strings.Contains(err.Error(), "this shared agent (its sessions bound to no user, together) already has 2 background tasks running") {
		t.Fatalf("a third session of the shared agent: want its bound, got %v", err)
	}
	// A user's tasks and a session without the shared key count apart.
	if _, created, err := st.Admit(ctx, rec("s1", "b1", "alice", later)); err != nil || !created {
		t.Fatalf("alice's task beside the shared agent's: %v %v", created, err)
	}
	if _, created, err := st.Admit(ctx, rec("x4", "c1", "", later)); err != nil || !created {
		t.Fatalf("a task counted by its session only: %v %v", created, err)
	}
}
