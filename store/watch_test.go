package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

const bound = 10 * time.Second

// newKV starts a server and creates a bucket named kv.
func newKV(t *testing.T) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	nc := testkit.Connect(t, testkit.RunServer(t))
	js := testkit.JetStream(t, nc)
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "kv", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

// applied records what a Watch applied.
type applied struct {
	mu  sync.Mutex
	ops []string // "put k=v" or "del k"
}

func (a *applied) apply(e jetstream.KeyValueEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e.Operation() == jetstream.KeyValuePut {
		a.ops = append(a.ops, "put "+e.Key()+"="+string(e.Value()))
	} else {
		a.ops = append(a.ops, "del "+e.Key())
	}
}

func (a *applied) get() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.ops)
}

func put(t *testing.T, kv jetstream.KeyValue, k, v string) {
	t.Helper()
	if _, err := kv.Put(t.Context(), k, []byte(v)); err != nil {
		t.Fatal(err)
	}
}

func TestWatchKV(t *testing.T) {
	_, kv := newKV(t)
	put(t, kv, "a.1", "one")
	put(t, kv, "a.2", "two")
	put(t, kv, "a.1", "uno")
	put(t, kv, "b.1", "other")
	var a applied
	w, err := store.WatchKV(t.Context(), kv, "a.*", a.apply)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, w.Stop)
	select {
	case <-w.Ready():
	case <-time.After(bound):
		t.Fatal("not ready")
	}
	// Ready means the current values (latest only, filtered) are applied.
	if got := a.get(); !slices.Equal(got, []string{"put a.2=two", "put a.1=uno"}) {
		t.Fatalf("initial values %v", got)
	}
	// Later changes follow in revision order.
	put(t, kv, "a.3", "three")
	put(t, kv, "b.2", "ignored")
	if err := kv.Delete(t.Context(), "a.2"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(t.Context(), "a.1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"put a.2=two", "put a.1=uno", "put a.3=three", "del a.2", "del a.1"}
	testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
		if got := a.get(); !slices.Equal(got, want) {
			return fmt.Errorf("applied %v, want %v", got, want)
		}
		return nil
	})
	w.Stop(t.Context())
	w.Stop(t.Context())
}

func TestWatchKVEmptyBucketIsReady(t *testing.T) {
	_, kv := newKV(t)
	var a applied
	w, err := store.WatchKV(t.Context(), kv, ">", a.apply)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop(t.Context())
	select {
	case <-w.Ready():
	case <-time.After(bound):
		t.Fatal("an empty bucket never becomes ready")
	}
	put(t, kv, "k", "v")
	testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
		if got := a.get(); !slices.Equal(got, []string{"put k=v"}) {
			return fmt.Errorf("applied %v", got)
		}
		return nil
	})
}

func TestWatchKVEndsWithContext(t *testing.T) {
	_, kv := newKV(t)
	ctx, cancel := context.WithCancel(t.Context())
	var a applied
	w, err := store.WatchKV(ctx, kv, ">", a.apply)
	if err != nil {
		t.Fatal(err)
	}
	<-w.Ready()
	cancel()
	// Stop after the context ended still returns, once the goroutine is gone
	// (goleak in TestMain checks that it is).
	done := make(chan struct{})
	go func() { w.Stop(t.Context()); close(done) }()
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatal("Stop did not return after the context ended")
	}
}

func TestWatchKVError(t *testing.T) {
	js, kv := newKV(t)
	if err := js.DeleteKeyValue(t.Context(), "kv"); err != nil {
		t.Fatal(err)
	}
	_, err := store.WatchKV(t.Context(), kv, ">", func(jetstream.KeyValueEntry) {})
	if err == nil {
		t.Fatal("a watch on a deleted bucket started")
	}
}

func TestIsNotFoundIsConflict(t *testing.T) {
	_, kv := newKV(t)
	ctx := t.Context()
	_, err := kv.Get(ctx, "missing")
	if !store.IsNotFound(err) || store.IsConflict(err) {
		t.Fatalf("Get of a missing key: %v", err)
	}
	rev, err := kv.Create(ctx, "k", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = kv.Create(ctx, "k", []byte("2"))
	if !store.IsConflict(err) || store.IsNotFound(err) {
		t.Fatalf("second Create: %v", err)
	}
	if _, err := kv.Update(ctx, "k", []byte("2"), rev); err != nil {
		t.Fatal(err)
	}
	_, err = kv.Update(ctx, "k", []byte("3"), rev)
	if !store.IsConflict(err) {
		t.Fatalf("Update at a stale revision: %v", err)
	}
	if err := kv.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "k"); !store.IsNotFound(err) {
		t.Fatalf("Get of a deleted key: %v", err)
	}
	for _, err := range []error{nil, errors.New("other"), context.DeadlineExceeded, fmt.Errorf("wrapped: %w", bus.ErrNotParked)} {
		if store.IsNotFound(err) || store.IsConflict(err) {
			t.Errorf("%v classified as not found or conflict", err)
		}
	}
	if !store.IsNotFound(fmt.Errorf("wrapped: %w", jetstream.ErrKeyNotFound)) || !store.IsConflict(fmt.Errorf("wrapped: %w", jetstream.ErrKeyExists)) {
		t.Error("wrapped sentinels not recognised")
	}
}

// heldWatch is a watch whose stop waits until release is closed.
type heldWatch struct {
	release chan struct{}
	stopped chan struct{} // closed when the stop was called
}

func (w heldWatch) Updates() <-chan jetstream.KeyValueEntry { return nil }
func (w heldWatch) Stop() error {
	close(w.stopped)
	<-w.release
	return nil
}

// TestStops: a watch's stop runs in the background, holding a landing
// context until it returns; past MaxStops in flight the next one runs on
// its caller's goroutine; Wait waits for them until its context ends.
func TestStops(t *testing.T) {
	var landings, landed atomic.Int64
	s := &store.Stops{Landing: func() (context.Context, context.CancelFunc) {
		landings.Add(1)
		return context.Background(), func() { landed.Add(1) }
	}}
	release := make(chan struct{})
	returned := make(chan struct{})
	go func() {
		for range store.MaxStops {
			s.Go(heldWatch{release, make(chan struct{})})
		}
		close(returned)
	}()
	testkit.Recv(t, returned, bound, "MaxStops stops held in the background")
	if s.InFlight() != store.MaxStops || landings.Load() != store.MaxStops || landed.Load() != 0 {
		t.Fatalf("in flight %d, landings %d, landed %d", s.InFlight(), landings.Load(), landed.Load())
	}
	// One more: on the caller's goroutine, so its stop has been called when
	// Stop returns (this one is not held).
	open := make(chan struct{})
	close(open)
	extra := heldWatch{open, make(chan struct{})}
	s.Go(extra)
	select {
	case <-extra.stopped:
	default:
		t.Fatal("the stop past MaxStops did not run on its caller's goroutine")
	}
	if landings.Load() != store.MaxStops {
		t.Fatalf("a stop run by its caller took a landing context: %d", landings.Load())
	}
	over, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Wait(over); err == nil {
		t.Fatal("Wait returned nil with stops in flight")
	}
	close(release)
	if err := s.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.InFlight() != 0 || landed.Load() != store.MaxStops {
		t.Fatalf("after Wait: in flight %d, landed %d", s.InFlight(), landed.Load())
	}
	var zero store.Stops // usable as it is
	zero.Go(heldWatch{open, make(chan struct{})})
	if err := zero.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A watch-fed cache reads its own writes: every write the leader had when
// LastRevision was asked is applied once Reached returns, whichever
// connection wrote it; a filter nothing matches has revision 0; a watch
// that ends wakes its waiters with an error.
func TestWatchReached(t *testing.T) {
	js, raw := newKV(t)
	kv := store.NewKV(js, raw, 1)
	var a applied
	w, err := store.WatchKV(t.Context(), raw, "a.*", a.apply)
	if err != nil {
		t.Fatal(err)
	}
	<-w.Ready()
	if rev, err := kv.LastRevision(t.Context(), "a.*"); err != nil || rev != 0 {
		t.Fatalf("an empty filter's revision %d, %v", rev, err)
	}
	for i := range 50 {
		put(t, raw, fmt.Sprintf("a.%d", i%7), fmt.Sprint(i))
		put(t, raw, "b.1", "not watched") // after it: a.* must not wait for it
		rev, err := kv.LastRevision(t.Context(), "a.*")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		err = w.Reached(ctx, rev)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if ops := a.get(); ops[len(ops)-1] != fmt.Sprintf("put a.%d=%d", i%7, i) {
			t.Fatalf("Reached(%d) before the write was applied: %v", rev, ops[len(ops)-1])
		}
	}
	ended := make(chan error, 1)
	go func() { ended <- w.Reached(t.Context(), 1<<40) }()
	if err := w.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Recv(t, ended, bound, "Reached after the watch stopped"); err == nil {
		t.Fatal("Reached returned nil for a revision the watch never applied")
	}
}
