package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// deployment is one connection's view of the buckets of a deployment.
type deployment struct {
	nc *nats.Conn
	st *store.Store
}

// single starts one node and returns n connections' stores on it.
func single(t *testing.T, n int) []deployment {
	t.Helper()
	s := testkit.RunServer(t)
	var out []deployment
	for range n {
		out = append(out, setup(t, testkit.Connect(t, s), 1))
	}
	return out
}

// replicated starts a 3-node cluster and returns n connections' stores
// (replicas 3), connection i on node i%3.
func replicated(t *testing.T, n int) []deployment {
	t.Helper()
	c := testkit.RunCluster(t)
	var out []deployment
	for i := range n {
		out = append(out, setup(t, testkit.ConnectURL(t, c.URL(i%c.Nodes())), 3))
	}
	return out
}

func setup(t *testing.T, nc *nats.Conn, replicas int) deployment {
	t.Helper()
	js := testkit.JetStream(t, nc)
	st, err := store.Setup(t.Context(), js, bus.NewSubjects("toolbus"), store.Config{Replicas: replicas, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	return deployment{nc: nc, st: st}
}

// onBoth runs fn on one node and on a replicated cluster.
func onBoth(t *testing.T, n int, fn func(t *testing.T, ds []deployment)) {
	t.Run("single", func(t *testing.T) { fn(t, single(t, n)) })
	t.Run("replicated", func(t *testing.T) { fn(t, replicated(t, n)) })
}

func TestConflictsOnEveryStream(t *testing.T) {
	onBoth(t, 1, func(t *testing.T, ds []deployment) {
		kv := ds[0].st.Sessions
		ctx := t.Context()
		rev, err := kv.Create(ctx, "k", []byte("1"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Create(ctx, "k", []byte("2")); !store.IsConflict(err) || store.IsTransient(err) {
			t.Errorf("second create: %v", err)
		}
		if _, err := kv.Update(ctx, "k", []byte("2"), rev+7); !store.IsConflict(err) || store.IsTransient(err) {
			t.Errorf("update at a wrong revision: %v", err)
		}
		if err := kv.Delete(ctx, "k", jetstream.LastRevision(rev+7)); !store.IsConflict(err) {
			t.Errorf("delete at a wrong revision: %v", err)
		}
		if _, err := store.Create(ctx, kv, "k", []byte("3"), store.Bounded); !store.IsConflict(err) {
			t.Errorf("store.Create of an existing key: %v", err)
		}
	})
}

func TestIsTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{jetstream.ErrKeyNotFound, false},
		{jetstream.ErrKeyExists, false},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10999}, false},
		{&jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled}, true},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), true},
		{nats.ErrTimeout, true},
		{nats.ErrNoResponders, true},
		{nats.ErrConnectionClosed, false},
		{fmt.Errorf("publish: %w", nats.ErrMaxPayload), false},
		{context.Canceled, false},
	} {
		if got := store.IsTransient(tc.err); got != tc.want {
			t.Errorf("IsTransient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// Many writers on one key through different nodes: no update is lost.
func TestUpdateManyWriters(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, ds []deployment) {
		const writers, each = 12, 15
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			kv := ds[w%len(ds)].st.Sessions
			wg.Go(func() {
				for range each {
					_, err := store.Update(t.Context(), kv, "s1", store.Bounded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
						n := 0
						if cur != nil {
							n, _ = strconv.Atoi(string(cur.Value()))
						}
						return []byte(strconv.Itoa(n + 1)), nil
					})
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		e, err := ds[0].st.Sessions.Get(t.Context(), "s1")
		if err != nil || string(e.Value()) != strconv.Itoa(writers*each) {
			t.Fatalf("after %d updates: %v %v", writers*each, e, err)
		}
	})
}

// A write through one node is read at once through another. On a cluster
// the reads go to the stream leader (a direct get may be answered by a
// follower that lags): the test counts them on the leader's API subject.
func TestReadYourWritesAcrossNodes(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, ds []deployment) {
		// One queue group with a member on every connection: a request is
		// counted once, by the member on the node it came in on, which
		// knows of it after that connection's flush (a plain subscription
		// on one node would miss requests through another node until the
		// route had carried its interest there, as it did under load).
		var leaderGets atomic.Int64
		for _, d := range ds {
			sub, err := d.nc.QueueSubscribe("$JS.API.STREAM.MSG.GET.KV_toolbus_parked", "count", func(*nats.Msg) { leaderGets.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			if err := d.nc.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 150 {
			w, r := ds[i%3].st.Parked, ds[(i+1)%3].st.Parked
			key := "s.r.c" + strconv.Itoa(i%5)
			val := []byte(strconv.Itoa(i))
			if _, err := w.Put(t.Context(), key, val); err != nil {
				t.Fatal(err)
			}
			e, err := r.Get(t.Context(), key)
			if err != nil || string(e.Value()) != string(val) {
				t.Fatalf("write %d read back through another node as %v %v", i, e, err)
			}
		}
		if err := ds[0].st.Parked.Delete(t.Context(), "s.r.c0"); err != nil {
			t.Fatal(err)
		}
		if _, err := ds[1].st.Parked.Get(t.Context(), "s.r.c0"); !store.IsNotFound(err) {
			t.Fatalf("a deleted key read as %v", err)
		}
		if _, err := ds[2].st.Parked.Get(t.Context(), "never"); !store.IsNotFound(err) {
			t.Fatalf("a missing key read as %v", err)
		}
		replicated := strings.HasSuffix(t.Name(), "/replicated")
		testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
			if got := leaderGets.Load(); replicated && got < 152 || !replicated && got != 0 {
				return fmt.Errorf("%d reads through the leader's message-get API", got)
			}
			return nil
		})
	})
}

func TestUpdateFunctionErrors(t *testing.T) {
	ds := single(t, 1)
	kv := ds[0].st.Sessions
	stop := errors.New("stop")
	if _, err := store.Update(t.Context(), kv, "k", store.Bounded, func(jetstream.KeyValueEntry) ([]byte, error) { return nil, stop }); !errors.Is(err, stop) {
		t.Fatalf("fn's error came back as %v", err)
	}
	if _, err := kv.Get(t.Context(), "k"); !store.IsNotFound(err) {
		t.Fatalf("a failed update wrote: %v", err)
	}
	rev, err := store.Update(t.Context(), kv, "k", store.Bounded, func(jetstream.KeyValueEntry) ([]byte, error) { return nil, store.ErrNoChange })
	if err != nil || rev != 0 {
		t.Fatalf("no change on a missing key: %d %v", rev, err)
	}
	first, _ := kv.Put(t.Context(), "k", []byte("v"))
	rev, err = store.Update(t.Context(), kv, "k", store.Bounded, func(jetstream.KeyValueEntry) ([]byte, error) { return nil, store.ErrNoChange })
	if err != nil || rev != first {
		t.Fatalf("no change: %d %v, want %d", rev, err, first)
	}
	deleted, err := store.Delete(t.Context(), kv, "k", store.Bounded)
	if err != nil || deleted != first {
		t.Fatalf("delete: %d %v", deleted, err)
	}
	if n, err := store.Delete(t.Context(), kv, "k", store.Bounded); err != nil || n != 0 {
		t.Fatalf("delete of a deleted key: %d %v", n, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := store.Update(ctx, kv, "k", store.UntilLanded, func(jetstream.KeyValueEntry) ([]byte, error) { return []byte("x"), nil }); err == nil {
		t.Fatal("an update with an ended context succeeded")
	}
}

// A write keeps trying through a leader election: the bucket's leader is
// stopped while writers run, and every update lands exactly once.
func TestUpdateRidesOutALeaderLoss(t *testing.T) {
	c := testkit.RunCluster(t)
	var ds []deployment
	for i := range 3 {
		ds = append(ds, setup(t, testkit.ConnectURL(t, c.URLs(i)), 3))
	}
	leader, err := c.WaitStreamLeader(testkit.Within(t, bound), "KV_toolbus_ledger")
	if err != nil {
		t.Fatal(err)
	}
	const writes = 40
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	started := make(chan struct{})
	var once sync.Once
	for w := range 3 {
		kv := ds[w].st.Ledger
		wg.Go(func() {
			for i := range writes {
				if i == 5 {
					once.Do(func() { close(started) })
				}
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				_, err := store.Update(ctx, kv, "n", store.UntilLanded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
					var seen []string
					if cur != nil {
						_ = json.Unmarshal(cur.Value(), &seen)
					}
					return json.Marshal(append(seen, fmt.Sprintf("%d-%d", w, i)))
				})
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	<-started
	c.StopNode(leader)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var survivor *store.Store
	for i := range 3 {
		if i != leader {
			survivor = ds[i].st
		}
	}
	e, err := survivor.Ledger.Get(t.Context(), "n")
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	if err := json.Unmarshal(e.Value(), &seen); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, s := range seen {
		count[s]++
	}
	if len(seen) != 3*writes || len(count) != 3*writes {
		t.Fatalf("%d writes stored, %d distinct; want %d once each", len(seen), len(count), 3*writes)
	}
}

// BenchmarkGet compares a KV read on one node (direct get), and on a
// 3-node cluster through the stream leader (what store.KV does) and as a
// direct get that any replica may answer (what it replaced).
func BenchmarkGet(b *testing.B) {
	put := func(b *testing.B, kv jetstream.KeyValue) {
		if _, err := kv.Put(b.Context(), "s1", []byte(`{"active":["ops"],"mode":"default"}`)); err != nil {
			b.Fatal(err)
		}
	}
	run := func(b *testing.B, kv jetstream.KeyValue) {
		put(b, kv)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := kv.Get(b.Context(), "s1"); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("single", func(b *testing.B) {
		nc := testkit.Connect(b, testkit.RunServer(b))
		js := testkit.JetStream(b, nc)
		st, err := store.Setup(b.Context(), js, bus.NewSubjects("toolbus"), store.Config{})
		if err != nil {
			b.Fatal(err)
		}
		run(b, st.Sessions)
	})
	c := testkit.RunCluster(b)
	nc := testkit.ConnectURL(b, c.URL(0))
	js := testkit.JetStream(b, nc)
	st, err := store.Setup(b.Context(), js, bus.NewSubjects("toolbus"), store.Config{Replicas: 3})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("replicated-leader", func(b *testing.B) { run(b, st.Sessions) })
	b.Run("replicated-direct", func(b *testing.B) { run(b, st.Sessions.KeyValue) })
}

// An attempt's own verdict ends a retry when it is marked Permanent; an
// error Retry does not know is taken as transient and tried again (an
// unmarked "the value moved on" kept a continuation's delete retrying until
// its context ended: TestCancelParkedCall hung).
func TestRetryPermanent(t *testing.T) {
	moved := errors.New("moved on")
	for _, tc := range []struct {
		name     string
		err      error
		attempts int
	}{
		{"permanent ends at once", store.Permanent(moved), 1},
		{"unknown error is tried again", moved, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			err := store.Retry(t.Context(), store.Policy{}, func(context.Context) error {
				if n++; n >= 3 {
					return nil
				}
				return tc.err
			})
			if n != tc.attempts {
				t.Fatalf("%d attempts, want %d", n, tc.attempts)
			}
			if tc.attempts == 1 && !errors.Is(err, moved) {
				t.Fatalf("err %v, want %v", err, moved)
			}
			if tc.attempts == 3 && err != nil {
				t.Fatalf("err %v after it landed", err)
			}
		})
	}
}

// TestLatestPastADelete: a key deleted before other keys were written
// does not end Latest: it reads on past the delete marker to the keys
// written after it.
func TestLatestPastADelete(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, ds []deployment) {
		w, r := ds[0].st.Parked, ds[1].st.Parked
		if _, err := w.Put(t.Context(), "t.w.a", []byte("1")); err != nil {
			t.Fatal(err)
		}
		if err := w.Delete(t.Context(), "t.w.a"); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Put(t.Context(), "t.w.b", []byte("1")); err != nil {
			t.Fatal(err)
		}
		got, err := r.Latest(t.Context(), "t.w.*")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Key() != "t.w.b" {
			keys := []string{}
			for _, e := range got {
				keys = append(keys, e.Key())
			}
			t.Fatalf("Latest(t.w.*) = %v, want t.w.b", keys)
		}
	})
}

// TestLatest: Latest returns each matching key's latest value, read from
// the stream leader through another node than the writer's, with deleted
// keys and keys outside the filter left out; no match is no entry and no
// error.
func TestLatest(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, ds []deployment) {
		w, r := ds[0].st.Parked, ds[1].st.Parked
		for i, kv := range [][2]string{{"t.w.a", "1"}, {"t.w.b", "1"}, {"u.w.a", "1"}, {"t.w.a", "2"}, {"t.w.c", "1"}} {
			if _, err := w.Put(t.Context(), kv[0], []byte(kv[1])); err != nil {
				t.Fatalf("put %d: %v", i, err)
			}
		}
		if err := w.Delete(t.Context(), "t.w.b"); err != nil {
			t.Fatal(err)
		}
		got, err := r.Latest(t.Context(), "t.w.*")
		if err != nil {
			t.Fatal(err)
		}
		values := map[string]string{}
		for _, e := range got {
			values[e.Key()] = string(e.Value())
		}
		if len(got) != 2 || values["t.w.a"] != "2" || values["t.w.c"] != "1" {
			t.Fatalf("Latest(t.w.*) = %v, want t.w.a=2 and t.w.c=1", values)
		}
		if none, err := r.Latest(t.Context(), "v.w.*"); err != nil || len(none) != 0 {
			t.Fatalf("Latest of no key = %v, %v", none, err)
		}
	})
}
