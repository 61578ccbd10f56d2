package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// ErrNoRoom refuses a new key of a bucket at its soft bound (Bound); the
// keys it holds are still written (docs/protocol.md 8, 1.24).
var ErrNoRoom = errors.New("holds as much as it may (its bound): nothing new is kept until stored records end or expire")

// Bound is the soft bound routers keep on a bucket's bytes, below its
// stream's max_bytes (HardBytes): only a new key is refused at it, so
// the margin above stays for the writes of keys already held (endings,
// answers, updates), which JetStream's discard-new check on a replicated
// stream counts whole (docs/store.md, "a soft bound below the stream's").
// A nil Bound admits everything.
type Bound struct {
	soft  int64
	every time.Duration
	read  func(context.Context) (int64, error) // the bucket's bytes now
	now   func() time.Time

	mu       sync.Mutex
	bytes    int64     // read at `at`, plus what Room admitted since
	at       time.Time // of the last read (zero: none yet)
	reading  bool      // a read is under way (reread); callers judge by what was read
	during   int64     // admitted since it began: what it may not have seen
	refusals *Refusals // new keys refused since the start
}

// Refusals counts a soft bound's refusals of new keys. The Bounds of one
// bucket in one process may share one (Counting): a router reports in its
// P_mcp row the refusals of the MCP facade it serves (Config.MCPRefusals).
// Concurrency-safe.
type Refusals struct {
	n    atomic.Uint64
	last atomic.Pointer[time.Time]
}

// Counting has b count its refusals in r (nil: its own), before b is used.
func (b *Bound) Counting(r *Refusals) *Bound {
	if b != nil && r != nil {
		b.refusals = r
	}
	return b
}

// BoundEvery is how old the bytes a Bound judges by may be; a refusal
// reads them again if a tenth of it passed.
const BoundEvery = time.Second

// BoundMargin is the least margin above a soft bound (HardBytes).
const BoundMargin = 16 << 20

// HardBytes is the max_bytes of a bucket whose soft bound is soft (<= 0:
// none, -1): soft plus a quarter of it, at least BoundMargin.
func HardBytes(soft int64) int64 {
	if soft <= 0 {
		return -1
	}
	return soft + max(soft/4, BoundMargin)
}

// NewBound bounds kv's bytes at soft, read once before it returns (the
// router's start); nil when soft <= 0.
func NewBound(ctx context.Context, kv jetstream.KeyValue, soft int64) *Bound {
	return NewBoundOf(ctx, func(ctx context.Context) (int64, error) {
		st, err := kv.Status(ctx)
		if err != nil {
			return 0, err
		}
		return int64(st.Bytes()), nil
	}, soft)
}

// NewBoundOf is NewBound for the bytes read returns (the quotas' state:
// a bucket and a stream together).
func NewBoundOf(ctx context.Context, read func(context.Context) (int64, error), soft int64) *Bound {
	if soft <= 0 {
		return nil
	}
	b := &Bound{soft: soft, every: BoundEvery, now: time.Now, reading: true, refusals: &Refusals{}, read: read}
	b.reread(ctx)
	return b
}

// BoundOf is the soft bound Setup gave kv (nil: none).
func BoundOf(kv jetstream.KeyValue) *Bound {
	if k, ok := kv.(*KV); ok && k != nil {
		return k.bound
	}
	return nil
}

// Room reports whether a new key of about n bytes fits under the soft
// bound, and counts it when it does. It judges by the bytes last read and
// what it admitted since; when they are BoundEvery old, or a tenth of
// that before a refusal, it starts a read the next callers judge by, and
// never waits for one (no read yet, or a failed one: room).
func (b *Bound) Room(ctx context.Context, n int) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refresh(ctx, n)
	if b.bytes+int64(n) > b.soft {
		b.refusals.n.Add(1)
		b.refusals.last.Store(new(b.now()))
		return false
	}
	b.add(n)
	return true
}

// add counts n bytes more; b.mu is held.
func (b *Bound) add(n int) {
	b.bytes += int64(n)
	if b.reading {
		b.during += int64(n)
	}
}

// refresh starts a read of the bucket's bytes, one at a time, when they
// are BoundEvery old, or a tenth of that when n more would not fit; b.mu
// is held.
func (b *Bound) refresh(ctx context.Context, n int) {
	age := b.now().Sub(b.at)
	if !b.reading && (age >= b.every || age >= b.every/10 && b.bytes+int64(n) > b.soft) {
		b.reading, b.during = true, 0
		go b.reread(context.WithoutCancel(ctx)) // the caller may be gone when it lands
	}
}

// reread reads the bucket's bytes, within 2 s, for the callers after it.
func (b *Bound) reread(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	bytes, err := b.read(ctx)
	cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading, b.at = false, b.now()
	if err == nil {
		b.bytes = bytes + b.during
	}
}

// state is b's state for operators, its bytes read again when BoundEvery
// old (for the next to ask).
func (b *Bound) state(ctx context.Context, bucket string) bus.BoundStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refresh(ctx, 0)
	return bus.BoundStatus{Bucket: bucket, Bytes: b.bytes, Bound: b.soft, Refused: b.refusals.n.Load(), LastRefused: b.refusals.last.Load()}
}

// Bounds are the soft bounds' states (protocol 1.24) for the router's
// metrics and the admin verb status: P_parked's, P_sessions', P_ledger's,
// tasks (P_tasks', tasks.Setup's; nil when tasks are off), P_mcp's,
// whose refusals are those of the MCP facade the process serves
// (Config.MCPRefusals; none without one), then more (the quotas' state's
// and the result cache's, 1.27). A bucket's bytes are read at most once a
// BoundEvery, however often they are asked.
func (s *Store) Bounds(ctx context.Context, tasks *Bound, more ...Named) []bus.BoundStatus {
	var out []bus.BoundStatus
	for _, k := range append([]Named{{Bucket: bus.BucketParked, B: BoundOf(s.Parked)}, {Bucket: bus.BucketSessions, B: BoundOf(s.Sessions)},
		{Bucket: bus.BucketLedger, B: BoundOf(s.Ledger)}, {Bucket: "tasks", B: tasks}, {Bucket: bus.BucketMCP, B: BoundOf(s.MCP)}}, more...) {
		if k.B != nil {
			st := k.B.state(ctx, k.Bucket)
			st.DropsOldest = k.DropsOldest
			out = append(out, st)
		}
	}
	return out
}

// Named is a bound Bounds shows under Bucket (nil B: none). DropsOldest
// marks one past which the oldest entries go and nothing is refused (the
// result cache: its Bound only reads the bytes).
type Named struct {
	Bucket      string
	B           *Bound
	DropsOldest bool
}

// Grew counts n bytes a held key grew by (a ledger record replacing its
// claim), which the next read would show, so new keys see them before.
func (b *Bound) Grew(n int) {
	if b != nil {
		b.mu.Lock()
		b.add(n)
		b.mu.Unlock()
	}
}
