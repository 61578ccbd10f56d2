// Package tasks owns background tasks (docs/protocol.md 5.10, docs/tasks.md):
// calls that went on past their timeout, their owner's lease, the bounds per
// session and user, and Get, List, Wait, Cancel and Output. Keys in P_tasks:
// t.<session>.<id> a task, s.<session> and u.<user key> the bounds' counts.
// A task is read under the caller's session only.
package tasks

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// Defaults of Config.
const (
	DefaultMaxPerSession = 8
	DefaultMaxPerUser    = 32
	DefaultMaxKept       = 256
	DefaultKeep          = 24 * time.Hour
)

// BucketName is the bucket's name after the deployment's prefix.
const BucketName = "tasks"

// Config bounds the tasks.
type Config struct {
	// MaxPerSession bounds the running tasks of one session; zero means
	// DefaultMaxPerSession.
	MaxPerSession int
	// MaxPerUser bounds the running tasks of one user over all sessions,
	// and the shared agent's (SharedKey); zero means DefaultMaxPerUser.
	MaxPerUser int
	// MaxKept bounds the tasks one session keeps, running or ended, each
	// counted until Keep after its deadline (docs/security.md, session
	// 36: ended records were unbounded, and every list reads them all);
	// zero means DefaultMaxKept. Keep is Setup's; zero means DefaultKeep.
	MaxKept int
	Keep    time.Duration
	// Landing gives each background watch stop its context (Wait;
	// store.Stops), so a drain waits for it; nil: only Stop waits.
	Landing func() (context.Context, context.CancelFunc)
}

// Setup creates (or updates) the P_tasks bucket, whose records expire keep
// (zero: DefaultKeep) after their last write, bounded softly at soft bytes
// (store.Bound; zero: store.DefaultTasksMaxBytes, negative: none): past it
// Admit refuses a new task, and the records held are still written.
func Setup(ctx context.Context, js jetstream.JetStream, s bus.Subjects, replicas int, keep time.Duration, soft int64) (jetstream.KeyValue, error) {
	keep = cmp.Or(max(keep, 0), DefaultKeep)
	kv, err := store.CreateBounded(ctx, js, jetstream.KeyValueConfig{Bucket: s.Bucket(BucketName),
		Description: "toolbus background tasks", TTL: keep, Replicas: max(replicas, 1)}, cmp.Or(soft, store.DefaultTasksMaxBytes))
	if err != nil {
		return nil, fmt.Errorf("tasks: %w", err)
	}
	return kv, nil
}

// Record is a task as stored: the task, what it takes to run it again,
// and who runs it.
type Record struct {
	bus.Task
	Owner string    `json:"owner"` // the router that runs the task
	Lease time.Time `json:"lease"` // when Owner's claim ends unless renewed
	// Input, User and Context are the call's, for a run on another router.
	Input   json.RawMessage `json:"input,omitempty"`
	User    json.RawMessage `json:"user,omitempty"`
	Context json.RawMessage `json:"context,omitempty"`
	UserKey string          `json:"user_key,omitempty"` // the key of the user's bound ("": none)
	// Rerun says another router may run the call again (a read-only or
	// idempotent tool); Durable that its result lands in the ledger.
	Rerun   bool `json:"rerun,omitempty"`
	Durable bool `json:"durable,omitempty"`
	Runs    int  `json:"runs"` // the runs started
}

// Errors of the verbs.
var (
	ErrLimit   = &bus.Error{Code: bus.CodeLimitExceeded} // the session's or the user's bound is full
	ErrUnknown = &bus.Error{Code: bus.CodeUnknownTask}   // no such task in the session
	// ErrNoRoom refuses a new task past P_tasks's soft bound (Setup).
	ErrNoRoom = bus.Errorf(bus.CodeLimitExceeded, "TaskLimitError: no new background task can be kept now: the store of tasks %v.", store.ErrNoRoom)
)

// Store is the tasks over one bucket. Its methods are safe for concurrent use.
type Store struct {
	kv    jetstream.KeyValue
	cfg   Config
	stops store.Stops // the watches of the waits that returned
	waits waits       // the waits open here
}

// waits counts the waits a Store holds, per session and in all.
type waits struct {
	mu        sync.Mutex
	bySession map[string]int
	all       int
}

// Bounds of the waits a Store holds at once (docs/tasks.md): each holds a
// KV watch (a JetStream consumer) and, in the router, a handler slot, for
// up to bus.MaxTaskWaitMS. Past either a wait is refused limit_exceeded.
const (
	MaxSessionWaits = 16   // of one session
	MaxWaits        = 1024 // of all sessions
)

// New returns the store over kv (from Setup).
func New(kv jetstream.KeyValue, cfg Config) *Store {
	cfg.MaxPerSession = cmp.Or(max(cfg.MaxPerSession, 0), DefaultMaxPerSession)
	cfg.MaxPerUser = cmp.Or(max(cfg.MaxPerUser, 0), DefaultMaxPerUser)
	cfg.MaxKept = cmp.Or(max(cfg.MaxKept, 0), DefaultMaxKept)
	cfg.Keep = cmp.Or(max(cfg.Keep, 0), DefaultKeep)
	return &Store{kv: kv, cfg: cfg, stops: store.Stops{Landing: cfg.Landing}}
}

// Stop waits until the watches of the waits that returned have stopped,
// or until ctx ends (then it returns an error).
func (s *Store) Stop(ctx context.Context) error { return s.stops.Wait(ctx) }

// UserKey is the bound's key of a batch's user value: "" for none.
func UserKey(user json.RawMessage) string {
	if len(user) == 0 || string(user) == "null" {
		return ""
	}
	sum := sha256.Sum256(user)
	return hex.EncodeToString(sum[:12])
}

// SharedKey is the bound's key of the shared agent, whose tasks in all its
// sessions count as one user's (a UserKey is 24 hex digits, never this).
const SharedKey = "shared-agent"

func taskKey(session, id string) string { return "t." + session + "." + id }

// ID is the task id of a call: 128 bits of SHA-256 of its bus.CallKey, the
// same for every copy of the call, so copies meet at the task's key (Admit).
func ID(session, replyID, callID string) string {
	sum := sha256.Sum256([]byte("toolbus task " + bus.CallKey(session, replyID, callID)))
	return hex.EncodeToString(sum[:16])
}

// index is the running tasks counted against one bound: id → when its
// count lapses (the task's deadline).
type index map[string]time.Time

// Admit stores rec as a new running task counted against its session's and
// user's bounds (created true), or returns the task another copy of the call
// stored (created false): racing copies create and count it once. ErrLimit
// (wrapped) when a bound is full.
func (s *Store) Admit(ctx context.Context, rec *Record) (got *Record, created bool, err error) {
	if !bus.ValidID(rec.Session) || !bus.ValidID(rec.ID) {
		return nil, false, bus.Errorf(bus.CodeBadRequest, "tasks: invalid session or task id")
	}
	// No read first: the router looked for the task before the run, and
	// the writes below find one (the count exists, or the create conflicts).
	until := rec.Deadline
	var added []string // the bounds' keys this call counted rec in (not a copy before it)
	undo := func() { s.release(ctx, rec, added) }
	// theirs is the answer when another copy's task of rec's id is
	// stored: the counts made here are that task's (the same id), unless
	// it ended and freed its own before they were made.
	theirs := func(cur *Record) (*Record, bool, error) {
		if !cur.Running() {
			s.release(ctx, rec, countKeys(rec))
		}
		return cur, false, nil
	}
	// A bound that refuses rec may be full with another copy's task of
	// rec's id stored meanwhile: then that task is the answer.
	refused := func(refusal error) (*Record, bool, error) {
		if cur, err := s.Get(ctx, rec.Session, rec.ID); err == nil {
			return theirs(cur)
		}
		undo()
		return nil, false, refusal
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return nil, false, err
	}
	// A new record past P_tasks's soft bound: refused before it is
	// counted (a copy's stored task is still the answer).
	if !store.BoundOf(s.kv).Room(ctx, len(raw)+len(rec.Session)+len(rec.ID)) {
		return refused(ErrNoRoom)
	}
	for _, b := range []struct {
		key   string
		until time.Time
		most  int
		what  string
	}{{"s." + rec.Session, until, s.cfg.MaxPerSession, "already has %d background tasks running" + running},
		{"k." + rec.Session, until.Add(s.cfg.Keep), s.cfg.MaxKept, "keeps %d background tasks, running or ended (the most allowed); an ended one counts until its record expires"}} {
		if ok, err := s.reserve(ctx, b.key, rec.ID, b.until, b.most, "session "+b.what); err != nil {
			return refused(err)
		} else if ok {
			added = append(added, b.key)
		}
	}
	if rec.UserKey != "" {
		what := "user already has %d background tasks running" + running
		if rec.UserKey == SharedKey {
			what = "shared agent (its sessions bound to no user, together) already has %d background tasks running" + running
		}
		if ok, err := s.reserve(ctx, "u."+rec.UserKey, rec.ID, until, s.cfg.MaxPerUser, what); err != nil {
			return refused(err)
		} else if ok {
			added = append(added, "u."+rec.UserKey)
		}
	}
	if _, err := store.Create(ctx, s.kv, taskKey(rec.Session, rec.ID), raw, store.Bounded); err != nil {
		if store.IsConflict(err) {
			cur, gerr := s.Get(ctx, rec.Session, rec.ID)
			if gerr != nil {
				return nil, false, fmt.Errorf("tasks: admit %s: %w", rec.ID, gerr)
			}
			return theirs(cur)
		}
		undo() // best effort: a copy racing with this one may count on them
		return nil, false, fmt.Errorf("tasks: admit %s: %w", rec.ID, err)
	}
	return rec, true, nil
}

// running ends the refusal of a bound of running tasks.
const running = " (the most allowed); wait for one or cancel one"

// reserve counts id against the bound at key, refusing past most (what
// says what is full, with %d for the count); added is false when a copy of
// the call counted id there already.
func (s *Store) reserve(ctx context.Context, key, id string, until time.Time, most int, what string) (added bool, err error) {
	_, err = store.Update(ctx, s.kv, key, store.Bounded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		ix := readIndex(cur)
		if _, ok := ix[id]; ok {
			added = false
			return nil, store.ErrNoChange
		}
		if len(ix) >= most {
			return nil, bus.Errorf(bus.CodeLimitExceeded,
				"TaskLimitError: this "+what, len(ix))
		}
		ix[id] = until
		added = true
		return json.Marshal(ix)
	})
	return added, err
}

// readIndex decodes an index and drops the lapsed counts.
func readIndex(cur jetstream.KeyValueEntry) index {
	ix := index{}
	if cur != nil {
		_ = json.Unmarshal(cur.Value(), &ix)
	}
	now := time.Now()
	maps.DeleteFunc(ix, func(_ string, until time.Time) bool { return now.After(until) })
	return ix
}

// countKeys are the keys of the bounds rec counts against.
func countKeys(rec *Record) []string {
	if rec.UserKey == "" {
		return []string{"s." + rec.Session}
	}
	return []string{"s." + rec.Session, "u." + rec.UserKey}
}

// release frees rec's counts at keys. Best effort: a count not freed
// lapses at the task's deadline.
func (s *Store) release(ctx context.Context, rec *Record, keys []string) {
	for _, key := range keys {
		_, _ = store.Update(ctx, s.kv, key, store.Bounded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
			ix := readIndex(cur)
			if _, ok := ix[rec.ID]; !ok || cur == nil {
				return nil, store.ErrNoChange
			}
			delete(ix, rec.ID)
			return json.Marshal(ix)
		})
	}
}

// Get returns session's task id, or ErrUnknown.
func (s *Store) Get(ctx context.Context, session, id string) (*Record, error) {
	if !bus.ValidID(session) || !bus.ValidID(id) {
		return nil, unknown(id)
	}
	e, err := s.kv.Get(ctx, taskKey(session, id))
	if store.IsNotFound(err) {
		return nil, unknown(id)
	}
	if err != nil {
		return nil, err
	}
	return decode(e.Value())
}

func unknown(id string) error {
	return bus.Errorf(bus.CodeUnknownTask, "TaskNotFoundError: The task %s does not exist.", id)
}

func decode(b []byte) (*Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("tasks: record: %w", err)
	}
	return &r, nil
}

// Update changes session's task id with fn under compare-and-set; fn
// returning store.ErrNoChange leaves it. It returns the record stored.
// What the record grew by (an end's result) counts against the soft bound
// at once (store.Bound.Grew).
func (s *Store) Update(ctx context.Context, session, id string, fn func(*Record) error) (*Record, error) {
	var out *Record
	grew := 0
	_, err := store.Update(ctx, s.kv, taskKey(session, id), store.Bounded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		grew = 0
		if cur == nil {
			return nil, unknown(id)
		}
		r, err := decode(cur.Value())
		if err != nil {
			return nil, err
		}
		out = r
		if err := fn(r); err != nil {
			return nil, err
		}
		b, err := json.Marshal(r)
		grew = len(b) - len(cur.Value())
		return b, err
	})
	if err == nil {
		store.BoundOf(s.kv).Grew(grew)
	}
	return out, err
}

// Finish ends a running task with res; ended reports that this call ended
// it (false: it had ended already, and keeps its first end).
func (s *Store) Finish(ctx context.Context, session, id string, res bus.Result) (rec *Record, ended bool, err error) {
	rec, err = s.Update(ctx, session, id, func(r *Record) error {
		if !r.Running() {
			return store.ErrNoChange
		}
		now := time.Now().UTC()
		res.Task = nil
		r.State, r.Result, r.Ended, ended = res.State, &res, &now, true
		return nil
	})
	if err == nil && ended {
		s.release(ctx, rec, countKeys(rec))
	}
	return rec, ended, err
}

// Cancel ends session's running task id as interrupted (a task that ended
// keeps its end). The caller tells whoever runs it.
func (s *Store) Cancel(ctx context.Context, session, id string) (*Record, bool, error) {
	r, err := s.Get(ctx, session, id)
	if err != nil {
		return nil, false, err
	}
	c := bus.Call{ID: r.CallID, Name: r.Tool}
	return s.Finish(ctx, session, id, bus.ErrorResult(c, bus.CodeInterrupted, "Task "+id+" stopped: cancelled before it finished."))
}

// List returns session's tasks, newest first.
func (s *Store) List(ctx context.Context, session string) ([]*Record, error) {
	if !bus.ValidID(session) {
		return nil, nil
	}
	var out []*Record
	err := s.entries(ctx, taskKey(session, "*"), func(_ string, value []byte) {
		if r, err := decode(value); err == nil {
			out = append(out, r)
		}
	})
	slices.SortFunc(out, func(a, b *Record) int { return b.Started.Compare(a.Started) })
	return out, err
}

// Running returns every running task of the deployment (for takeover),
// read through the sessions' counts, not the ended tasks kept.
func (s *Store) Running(ctx context.Context) ([]*Record, error) {
	var out []*Record
	err := s.entries(ctx, "s.*", func(key string, value []byte) {
		var ix index // lapsed counts too: their tasks still need an end
		_ = json.Unmarshal(value, &ix)
		for id := range ix {
			if r, err := s.Get(ctx, strings.TrimPrefix(key, "s."), id); err == nil && r.Running() {
				out = append(out, r)
			}
		}
	})
	return out, err
}

// latest is the exact listing of a store.KV (Setup's bucket).
type latest interface {
	Latest(ctx context.Context, filter string) ([]jetstream.KeyValueEntry, error)
}

// entries calls f with each existing entry under filter, read by message
// gets: a key listing misses keys rewritten meanwhile, as leases are
// (TestListWhileRenewed). Another bucket type is listed by keys.
func (s *Store) entries(ctx context.Context, filter string, f func(key string, value []byte)) error {
	if l, ok := s.kv.(latest); ok {
		es, err := l.Latest(ctx, filter)
		for _, e := range es {
			f(e.Key(), e.Value())
		}
		return err
	}
	lister, err := s.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return err
	}
	for key := range lister.Keys() {
		if e, err := s.kv.Get(ctx, key); err == nil {
			f(key, e.Value())
		}
	}
	return nil
}

// Wait returns tasks ids once all (any: one) ended, or at ctx's end as they
// are then (an expired ctx still answers, as a poll). An unknown id is an
// error before any wait.
func (s *Store) Wait(ctx context.Context, session string, ids []string, any bool) ([]*Record, error) {
	if !bus.ValidID(session) {
		return nil, unknown(strings.Join(ids, ","))
	}
	if err := s.waits.enter(session); err != nil {
		return nil, err
	}
	defer s.waits.leave(session)
	w, err := s.kv.Watch(ctx, taskKey(session, "*"))
	if err != nil && ctx.Err() == nil {
		return nil, err
	}
	if w != nil {
		// Not w.Stop: it deletes the watch's consumer and waits for the
		// reply, up to 5 s on a cluster, after the answer is known.
		defer s.stops.Go(w)
	}
	read, cancel := context.WithTimeout(context.WithoutCancel(ctx), pollBound)
	defer cancel()
	cur := map[string]*Record{}
	for _, id := range ids {
		r, err := s.Get(read, session, id)
		if err != nil {
			return nil, err
		}
		cur[id] = r
	}
	if w == nil {
		return ordered(cur, ids), nil
	}
	for !waitDone(cur, any) {
		select {
		case <-ctx.Done():
			return ordered(cur, ids), nil
		case e, ok := <-w.Updates():
			if !ok {
				return ordered(cur, ids), nil
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			id := e.Key()[strings.LastIndexByte(e.Key(), '.')+1:]
			if _, want := cur[id]; want {
				if r, err := decode(e.Value()); err == nil {
					cur[id] = r
				}
			}
		}
	}
	return ordered(cur, ids), nil
}

// enter counts a wait of session, or refuses it past MaxSessionWaits or
// MaxWaits.
func (w *waits) enter(session string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.bySession[session] >= MaxSessionWaits || w.all >= MaxWaits {
		return bus.Errorf(bus.CodeLimitExceeded,
			"TaskWaitLimitError: this router already holds %d task waits of this session and %d in all (at most %d and %d); try again once one returned",
			w.bySession[session], w.all, MaxSessionWaits, MaxWaits)
	}
	if w.bySession == nil {
		w.bySession = map[string]int{}
	}
	w.bySession[session]++
	w.all++
	return nil
}

// leave uncounts a wait of session.
func (w *waits) leave(session string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.bySession[session]--; w.bySession[session] <= 0 {
		delete(w.bySession, session)
	}
	w.all--
}

// pollBound bounds the reads of a wait's current states.
const pollBound = 10 * time.Second

func waitDone(cur map[string]*Record, any bool) bool {
	ended := 0
	for _, r := range cur {
		if !r.Running() {
			ended++
		}
	}
	if any {
		return ended > 0
	}
	return ended == len(cur)
}

func ordered(cur map[string]*Record, ids []string) []*Record {
	out := make([]*Record, 0, len(ids))
	for _, id := range ids {
		out = append(out, cur[id])
	}
	return out
}

// Claim makes owner the runner of a running task whose lease ended, until
// lease; false when it is not running or another owner holds it.
func (s *Store) Claim(ctx context.Context, session, id, owner string, now, lease time.Time) (*Record, bool, error) {
	var claimed bool
	r, err := s.Update(ctx, session, id, func(r *Record) error {
		if !r.Running() || (r.Owner != owner && r.Lease.After(now)) {
			return store.ErrNoChange
		}
		r.Owner, r.Lease, claimed = owner, lease, true
		return nil
	})
	return r, claimed, err
}

// Renew extends owner's lease on a running task; false when the task
// ended or another owner took it over (the caller stops running it).
func (s *Store) Renew(ctx context.Context, session, id, owner string, lease time.Time) (bool, error) {
	var held bool
	_, err := s.Update(ctx, session, id, func(r *Record) error {
		if !r.Running() || r.Owner != owner {
			return store.ErrNoChange
		}
		r.Lease, held = lease, true
		return nil
	})
	if errors.Is(err, ErrUnknown) {
		return false, nil
	}
	return held, err
}

// Output reads the progress blocks a task's call published so far from the
// session's events (stream, subject) between its start and its end (or
// deadline, or its task.done), the last at most maxBytes of them (truncated
// says older ones were left out); ctx bounds the read. The session's later
// events are not read: an agent's flood of them after the task cost every
// read (docs/security.md).
//
// cur, when not nil, is where an earlier read of the task ended: the read
// goes on from there, so polling a running task reads each event of its
// session once, not every one since its start at each read; cur is moved
// to where this read ends (unless it fails).
func Output(ctx context.Context, js jetstream.JetStream, stream, subject string, rec *Record, maxBytes int, cur *Cursor) (out []bus.Block, truncated bool, err error) {
	start, until := rec.Started.Add(-time.Second), rec.Deadline.Add(time.Second) // a second for the clocks
	if rec.Ended != nil {
		until = rec.Ended.Add(time.Second)
	}
	cc := jetstream.ConsumerConfig{FilterSubject: subject, AckPolicy: jetstream.AckNonePolicy,
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start, InactiveThreshold: outputIdle, MemoryStorage: true, Replicas: 1}
	if cur != nil && cur.Of != mark(rec) { // another record under the same id (TestCursorOfAnotherRecord)
		*cur = Cursor{}
	}
	if cur != nil && cur.Done { // the read that saw its end
		return cur.Out, cur.Truncated, nil
	}
	var size int
	next, done := uint64(0), false
	if cur != nil && cur.Next > 0 {
		cc.DeliverPolicy, cc.OptStartTime, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, nil, cur.Next
		out, size, truncated, next = slices.Clone(cur.Out), cur.Size, cur.Truncated, cur.Next
	}
	defer func() {
		if cur != nil && err == nil && next > 0 {
			*cur = Cursor{Of: mark(rec), Next: next, Out: out, Size: size, Truncated: truncated, Done: done}
		}
	}()
	// A plain pull consumer, made and deleted here: an ordered one makes a
	// new consumer on every Fetch and deletes the last on a goroutine of
	// its own, so a read left consumers behind it for a while; nats.go
	// leaves an ordered consumer 5 minutes idle, and the events stream's
	// consumers bound every session's replays (docs/security.md,
	// TestAttackTaskOutputConsumers).
	cons, err := js.CreateConsumer(ctx, stream, cc)
	if err != nil {
		return nil, false, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, stream, cons.CachedInfo().Name)
	}()
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, false, err
	}
	// Events past the read's start may be gone (the stream's bound drops
	// the oldest, 1.23): the output cannot start at the task's first
	// progress then, and says so (protocol 5.10; TestOutputLostToTheBound).
	if s, err := js.Stream(ctx, stream); err == nil {
		st := s.CachedInfo().State
		if cc.OptStartSeq > 0 {
			truncated = truncated || st.FirstSeq > cc.OptStartSeq
		} else {
			truncated = st.FirstSeq > 1 && (st.Msgs == 0 || st.FirstTime.After(start))
		}
	}
	pending := info.NumPending
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return out, truncated, err
		}
		got, past := 0, false
		for m := range batch.Messages() {
			got++
			pending--
			md, err := m.Metadata()
			if past || err == nil && md.Timestamp.After(until) {
				past = true
				continue
			}
			if err == nil {
				next = md.Sequence.Stream + 1
			}
			blocks, end := progressOf(m, rec)
			past = end
			for _, b := range blocks {
				out = append(out, b)
				size += cost(b)
			}
			for size > maxBytes && len(out) > 1 {
				size -= cost(out[0])
				out, truncated = out[1:], true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return out, truncated, err
		}
		done = past
		if got == 0 || past || ctx.Err() != nil {
			break
		}
	}
	return out, truncated, nil
}

// cost is what block b counts against a task output's bound: its JSON
// encoding, every member of it (TestAttackTaskOutputFreeBlocks).
func cost(b bus.Block) int {
	enc, _ := b.MarshalJSON()
	return len(enc)
}

// Cursor is where a read of a task's output ended: the next stream
// sequence of the session's events and what was read before it.
type Cursor struct {
	Of        string // the record read (mark): a task made again under its id starts afresh
	Next      uint64
	Out       []bus.Block
	Size      int
	Truncated bool
	Done      bool // the read came to the task's end: nothing more to read
}

// mark tells apart the records a task id may have had: a task made again
// under an id after its record expired starts later, and may be another call.
func mark(rec *Record) string {
	return rec.ReplyID + "\x00" + rec.CallID + "\x00" + rec.Started.UTC().Format(time.RFC3339Nano)
}

// outputIdle is how long an Output consumer whose delete failed outlives
// its last read.
const outputIdle = 10 * time.Second

// progressOf is the blocks of m when it is a progress event of rec's call;
// end reports the call's task.done, after which no progress of it comes.
func progressOf(m jetstream.Msg, rec *Record) (blocks []bus.Block, end bool) {
	e, err := bus.Decode(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
	if err != nil || e.ReplyID != rec.ReplyID || e.ToolCallID != rec.CallID {
		return nil, false
	}
	var p bus.Progress
	if e.Type != bus.TypeCallProgress || json.Unmarshal(e.Data, &p) != nil {
		return nil, e.Type == bus.TypeTaskDone
	}
	return p.Output, false
}
