package tasks_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/tasks"
)

// TestAttack36TasksBucketBounded (session 36, the twin of mcp/facade's
// TestAttack36MCPBucketBounded): MaxKept bounds a session's tasks, but
// sessions are unbounded in number (the shared agent makes them up), so
// P_tasks grew without a byte bound. It now has a soft bound (Setup;
// store.Bound) below its stream's max_bytes: past it a new task is
// refused limit_exceeded and stored and counted nowhere, and the tasks
// held still take every write: lease renewals, ends with their results,
// cancels. On a 3-node cluster, the bucket R3 (where JetStream's
// discard-new check counts a replacement whole).
func TestAttack36TasksBucketBounded(t *testing.T) {
	const soft = 32 << 10
	c := testkit.RunCluster(t)
	js := testkit.JetStream(t, testkit.ConnectURL(t, c.URL(1)))
	ctx := t.Context()
	kv, err := tasks.Setup(ctx, js, bus.NewSubjects(""), 3, time.Hour, soft)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "KV_"+bus.NewSubjects("").Bucket(tasks.BucketName))
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.MaxBytes != store.HardBytes(soft) || cfg.Discard != jetstream.DiscardNew || cfg.Replicas != 3 {
		t.Fatalf("max_bytes %d, discard %v, replicas %d", cfg.MaxBytes, cfg.Discard, cfg.Replicas)
	}
	st := tasks.New(kv, tasks.Config{})
	input, _ := json.Marshal(strings.Repeat("x", 1<<10))
	var held []*tasks.Record
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("no task refused")
		}
		r := rec(fmt.Sprintf("made-up-%d", i), "a", "", time.Now().Add(time.Hour))
		r.Input = input
		_, _, err := st.Admit(ctx, r)
		if err == nil {
			held = append(held, r)
			continue
		}
		if !isCode(err, bus.CodeLimitExceeded) || !strings.Contains(err.Error(), "TaskLimitError: no new background task can be kept now: the store of tasks holds as much as it may") {
			t.Fatalf("task %d: %v", i, err)
		}
		if _, err := st.Get(ctx, r.Session, r.ID); !isCode(err, bus.CodeUnknownTask) {
			t.Fatalf("the refused task is stored: %v", err)
		}
		if _, err := kv.Get(ctx, "s."+r.Session); !store.IsNotFound(err) {
			t.Fatalf("the refused task is counted: %v", err)
		}
		break
	}
	if len(held) < 5 {
		t.Fatalf("%d tasks before the bound", len(held))
	}
	// A copy of a held task is no new one: it meets the task.
	if got, created, err := st.Admit(ctx, rec(held[0].Session, held[0].ID, "", time.Now().Add(time.Hour))); err != nil || created || got.ID != held[0].ID {
		t.Fatalf("a copy at the bound: %v %v %v", got, created, err)
	}
	out := []bus.Block{{Type: bus.BlockText, Text: strings.Repeat("y", 64<<10)}}
	for i, r := range held {
		if ok, err := st.Renew(ctx, r.Session, r.ID, "a", time.Now().Add(2*time.Minute)); err != nil || !ok {
			t.Fatalf("renewing held task %d: %v %v", i, ok, err)
		}
		if i%2 == 1 {
			if _, _, err := st.Cancel(ctx, r.Session, r.ID); err != nil {
				t.Fatalf("cancelling held task %d: %v", i, err)
			}
			continue
		}
		res := bus.Result{ID: r.CallID, Name: "t", State: bus.StateSuccess, Output: out}
		if _, ended, err := st.Finish(ctx, r.Session, r.ID, res); err != nil || !ended {
			t.Fatalf("ending held task %d of %d: %v %v", i, len(held), ended, err)
		}
	}
	// The ends' results counted at once (Grew): still no room.
	if _, _, err := st.Admit(ctx, rec("after", "a", "", time.Now().Add(time.Hour))); !isCode(err, bus.CodeLimitExceeded) {
		t.Fatalf("a new task after the ends: %v", err)
	}
	t.Logf("%d tasks held at a soft bound of %d bytes, each renewed and ended", len(held), soft)
}

// TestTasksBoundUpgrade: a bucket of a router before the bound, holding
// more than the hard bound, gets a max_bytes above what it holds (store's
// hardBytes): its tasks still end, new ones are refused until it drains.
func TestTasksBoundUpgrade(t *testing.T) {
	const soft = 16 << 10
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	ctx := t.Context()
	old, err := tasks.Setup(ctx, js, bus.NewSubjects(""), 1, time.Hour, -1)
	if err != nil {
		t.Fatal(err)
	}
	st := tasks.New(old, tasks.Config{MaxPerSession: 100})
	big, _ := json.Marshal(strings.Repeat("x", 1<<20))
	var held []*tasks.Record
	for i := range 20 { // 20 MiB: above HardBytes(soft)
		r := rec("s1", fmt.Sprintf("t%d", i), "", time.Now().Add(time.Hour))
		r.Input = big
		if _, _, err := st.Admit(ctx, r); err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	kv, err := tasks.Setup(ctx, js, bus.NewSubjects(""), 1, time.Hour, soft)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := js.Stream(ctx, "KV_"+bus.NewSubjects("").Bucket(tasks.BucketName))
	if info := s.CachedInfo(); int64(info.State.Bytes) <= store.HardBytes(soft) || info.Config.MaxBytes != int64(info.State.Bytes)+store.BoundMargin {
		t.Fatalf("max_bytes %d, holding %d", info.Config.MaxBytes, info.State.Bytes)
	}
	st = tasks.New(kv, tasks.Config{MaxPerSession: 100})
	if _, _, err := st.Admit(ctx, rec("s2", "new", "", time.Now().Add(time.Hour))); !isCode(err, bus.CodeLimitExceeded) {
		t.Fatalf("a new task: %v", err)
	}
	for _, r := range held {
		if _, ended, err := st.Finish(ctx, r.Session, r.ID, bus.Result{ID: r.CallID, Name: "t", State: bus.StateSuccess}); err != nil || !ended {
			t.Fatalf("ending %s: %v %v", r.ID, ended, err)
		}
	}
}
