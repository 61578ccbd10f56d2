package facade

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// Bounds of the records the facade keeps in its bucket (store.MCPConfig).
const (
	// DefaultTaskTTL is a task's TTL when the client asks for none.
	DefaultTaskTTL = time.Hour
	// DefaultMaxTasks bounds the task records one (session, user) keeps.
	DefaultMaxTasks = 100
	// taskPollMS is the poll interval the facade suggests.
	taskPollMS = 500
)

// taskRecord is a task as stored under t.<session>.<user digest>.<task id>,
// before the CreateTaskResult is returned: any facade process answers for it.
// A completed task's result is kept apart, under o.<…>.<task id> (taskResults),
// so that reading a record (tasks/list, tasks/get) never reads a result; a
// record an earlier facade wrote holds its result, and is read as it is.
type taskRecord struct {
	ID      string               `json:"id"`
	Session string               `json:"session"`
	User    string               `json:"user"`
	Tool    string               `json:"tool"`
	CallID  string               `json:"call_id"`            // the bus call
	ReplyID string               `json:"reply_id"`           // its batch's reply id
	BusTask string               `json:"bus_task,omitempty"` // the bus task it went on as (docs/protocol.md 5.10)
	Status  mcp.TaskStatus       `json:"status"`
	Message string               `json:"message,omitempty"`
	Inputs  map[string]taskInput `json:"inputs,omitempty"` // what it waits for its host to answer, by key
	Created time.Time            `json:"created"`
	Updated time.Time            `json:"updated"`
	TTLMS   int64                `json:"ttl_ms"`
	Result  json.RawMessage      `json:"result,omitempty"` // completed, once read (taskResults.load); earlier facades stored it here
	Error   string               `json:"error,omitempty"`  // failed: the JSON-RPC error's message
}

// expires is when the record is dropped (its TTL).
func (r *taskRecord) expires() time.Time {
	return r.Created.Add(time.Duration(r.TTLMS) * time.Millisecond)
}

// task is the record as MCP shows it.
func (r *taskRecord) task() mcp.Task {
	ttl, poll := r.TTLMS, int64(taskPollMS)
	return mcp.Task{TaskId: r.ID, Status: r.Status, StatusMessage: r.Message, CreatedAt: r.Created.UTC().Format(time.RFC3339Nano),
		LastUpdatedAt: r.Updated.UTC().Format(time.RFC3339Nano), TTL: &ttl, PollInterval: &poll}
}

// idPattern is a task id and a request state: 128 random bits in hex;
// anything else is never made into a key.
var idPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// digest names free text in a key (a user, an MCP session id).
func digest(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:16])
}

// userKey is the key of a (session, user)'s record of kind in the bucket,
// <kind>.<session>.<user digest>[.<id>]: t a task, o a completed task's
// result, i the tasks' index, r a request state (elicit.go), m an MCP
// session's client and x its carried messages (crossing.go). An id ""
// makes the prefix of them all.
func userKey(kind, session, user string, id ...string) string {
	return strings.Join(append([]string{kind, session, digest(user)}, id...), ".")
}

var (
	errNoStore      = errors.New("facade: the tasks bucket is unavailable") // nothing was published
	errNotFound     = errors.New("task not found")                          // for this session and user
	errTooManyTasks = errors.New("facade")                                  // the (session, user) keeps MaxTasks live tasks
	// errNoRoom refuses a new task or request state past the bucket's soft bound.
	errNoRoom = fmt.Errorf("facade: no new task or request state can be kept now: the bucket of MCP tasks %w", store.ErrNoRoom)
)

// kvStore is the facade's bucket, bound (or created) on first use; reads go
// to the leader and writes are compare-and-set (docs/protocol.md 8).
type kvStore struct {
	nc       *nats.Conn
	subj     bus.Subjects
	replicas int             // when the facade creates the bucket
	maxTasks int             // live records per (session, user)
	soft     int64           // the bucket's soft bound (Config.MaxBytes)
	refusals *store.Refusals // its refusals' count (Config.Refusals)
	log      *slog.Logger

	mu     sync.Mutex
	kv     *store.KV
	bound  *store.Bound // set with kv
	failed time.Time    // when the bucket was last found out of reach
}

func (st *kvStore) bucket(ctx context.Context) (*store.KV, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.kv != nil {
		return st.kv, nil
	}
	js, err := jetstream.New(st.nc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoStore, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cfg := store.MCPConfig(st.subj, st.replicas, jetstream.FileStorage)
	cfg.MaxBytes = store.HardBytes(st.soft)
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err == nil {
		st.kv, err = store.OpenKV(ctx, js, kv)
		st.bound = store.NewBound(ctx, kv, st.soft).Counting(st.refusals)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoStore, err)
	}
	return st.kv, nil
}

// available reports whether this login can reach the bucket (within 3 s; a
// failure is remembered for a minute); those that cannot get no tasks.
func (st *kvStore) available(ctx context.Context) bool {
	st.mu.Lock()
	ok, recent := st.kv != nil, time.Since(st.failed) < time.Minute
	st.mu.Unlock()
	if ok || recent {
		return ok
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := st.bucket(ctx); err != nil {
		st.mu.Lock()
		st.failed = time.Now()
		st.mu.Unlock()
		st.log.Warn("facade: no MCP tasks: the tasks bucket is out of reach of this login", "err", err)
		return false
	}
	return true
}

// createTask stores a new record, refused when the (session, user) keeps
// MaxTasks live ones, as counted by its index (compare-and-set: exact across
// processes, which a key listing is not), or past the bucket's soft bound.
func (st *kvStore) createTask(ctx context.Context, r *taskRecord) error {
	kv, err := st.bucket(ctx)
	if err != nil {
		return err
	}
	key := userKey("t", r.Session, r.User, r.ID)
	raw, _ := json.Marshal(r)
	if !st.bound.Room(ctx, len(key)+len(raw)) {
		return errNoRoom
	}
	var expired []string // pruned from the index: their records go too, or they would stay the bucket's day uncounted
	_, err = store.Update(ctx, kv, userKey("i", r.Session, r.User), store.Bounded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		var idx taskIndex
		if cur != nil && len(cur.Value()) > 0 {
			if err := json.Unmarshal(cur.Value(), &idx); err != nil {
				return nil, fmt.Errorf("facade: task index of this session and user: %w", err)
			}
		}
		now := time.Now()
		expired = expired[:0]
		idx.Tasks = slices.DeleteFunc(idx.Tasks, func(e indexEntry) bool {
			if now.Before(e.Expires) {
				return false
			}
			expired = append(expired, e.ID)
			return true
		})
		if len(idx.Tasks) >= st.maxTasks {
			return nil, fmt.Errorf("%w: %d tasks kept for this session and user (the most); wait for some to expire", errTooManyTasks, len(idx.Tasks))
		}
		idx.Tasks = append(idx.Tasks, indexEntry{ID: r.ID, Expires: r.expires()})
		return json.Marshal(&idx)
	})
	if errors.Is(err, errTooManyTasks) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %v", errNoStore, err)
	}
	for _, id := range expired {
		st.delete(ctx, taskKeys(r.Session, r.User, id)...)
	}
	if _, err := store.Create(ctx, kv, key, raw, store.Bounded); err != nil {
		return fmt.Errorf("%w: %v", errNoStore, err)
	}
	return nil
}

// taskIndex is the (session, user)'s live tasks.
type taskIndex struct {
	Tasks []indexEntry `json:"tasks"`
}

type indexEntry struct {
	ID      string    `json:"id"`
	Expires time.Time `json:"expires"`
}

// listTasks returns the (session, user)'s live records, oldest first, from
// its index (a key listing would create a consumer), deleting the expired.
func (st *kvStore) listTasks(ctx context.Context, session, user string) ([]*taskRecord, error) {
	var idx taskIndex
	if err := st.get(ctx, userKey("i", session, user), &idx); errors.Is(err, errNoStore) {
		return nil, err
	} else if err != nil {
		return nil, nil // none, or not an index
	}
	var out []*taskRecord
	now := time.Now()
	for _, t := range idx.Tasks {
		if !now.Before(t.Expires) {
			st.delete(ctx, taskKeys(session, user, t.ID)...)
			continue
		}
		r, err := st.getTask(ctx, session, user, t.ID)
		if errors.Is(err, errNoStore) { // a record not read is not a record not kept: the bound fails closed
			return nil, err
		}
		if err == nil { // else not written, or not a record
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b *taskRecord) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// get decodes what key holds into v: errNotFound when it holds nothing,
// errNoStore when the bucket cannot be read, any other error when what it
// holds is not JSON.
func (st *kvStore) get(ctx context.Context, key string, v any) error {
	kv, err := st.bucket(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return errNotFound
	}
	if err != nil {
		return fmt.Errorf("%w: %v", errNoStore, err)
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return fmt.Errorf("facade: record %s: %w", key, err)
	}
	return nil
}

// put stores v's JSON under key, riding out transient errors; create only
// when the key holds nothing, and only under the bucket's soft bound.
func (st *kvStore) put(ctx context.Context, key string, v any, create bool) error {
	kv, err := st.bucket(ctx)
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(v)
	if create && !st.bound.Room(ctx, len(key)+len(raw)) {
		return errNoRoom
	}
	if create {
		_, err = store.Create(ctx, kv, key, raw, store.Bounded)
	} else {
		err = store.Retry(ctx, store.Bounded, func(ctx context.Context) error {
			_, err := kv.Put(ctx, key, raw)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("%w: %v", errNoStore, err)
	}
	return nil
}

// delete deletes keys, best effort (what they hold expires anyway).
func (st *kvStore) delete(ctx context.Context, keys ...string) {
	if kv, err := st.bucket(ctx); err == nil {
		for _, key := range keys {
			_ = kv.Delete(ctx, key)
		}
	}
}

// taskKeys are the keys of what a task keeps: its record and its result.
func taskKeys(session, user, id string) []string {
	return []string{userKey("t", session, user, id), userKey("o", session, user, id)}
}

// subject is the subject a write of key is published on.
func (st *kvStore) subject(ctx context.Context, key string) (string, error) {
	kv, err := st.bucket(ctx)
	if err != nil {
		return "", err
	}
	return "$KV." + kv.Bucket() + "." + key, nil
}

// getTask returns the (session, user)'s live task id.
func (st *kvStore) getTask(ctx context.Context, session, user, id string) (*taskRecord, error) {
	var r taskRecord
	if !idPattern.MatchString(id) {
		return nil, errNotFound
	}
	if err := st.get(ctx, userKey("t", session, user, id), &r); err != nil {
		return nil, err
	}
	// The key names the session and user; the record must agree.
	if r.Session != session || r.User != user || r.ID != id || time.Now().After(r.expires()) {
		return nil, errNotFound
	}
	return &r, nil
}

// updateTask applies change to the stored record, compare-and-set, unless
// it is terminal already (the first end wins). It returns the record as
// stored afterwards.
func (st *kvStore) updateTask(ctx context.Context, session, user, id string, change func(*taskRecord)) (*taskRecord, error) {
	if !idPattern.MatchString(id) {
		return nil, errNotFound
	}
	kv, err := st.bucket(ctx)
	if err != nil {
		return nil, err
	}
	var out *taskRecord
	_, err = store.Update(ctx, kv, userKey("t", session, user, id), store.Bounded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		if cur == nil {
			return nil, errNotFound
		}
		var r taskRecord
		if err := json.Unmarshal(cur.Value(), &r); err != nil {
			return nil, err
		}
		if r.Session != session || r.User != user || r.ID != id || time.Now().After(r.expires()) {
			return nil, errNotFound // past its TTL a record takes no write (its result could be a MiB), and is dropped
		}
		out = &r
		if r.Status.IsTerminal() {
			return nil, store.ErrNoChange
		}
		change(&r)
		r.Updated = time.Now()
		return json.Marshal(&r)
	})
	if errors.Is(err, errNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoStore, err)
	}
	return out, nil
}

// maxResult bounds a result the bucket keeps (its values are at most 1 MiB).
const maxResult = 1<<20 - 1024

// taskResults keeps each completed task's CallToolResult under its own key,
// o.<session>.<user digest>.<task id>, apart from the task's record.
type taskResults struct{ st *kvStore }

// end records the task's end: change makes the record terminal, and a
// completed one's result (nil for any other end) is written first, so that
// a reader who sees "completed" can read the result. A result is not
// written for a record that ended already or is past its TTL, and is
// deleted again when the record did not end completed by this write
// (another end won meanwhile); one left by a crash between the two writes
// goes with its task (taskKeys) or at the bucket's age. A result above
// maxResult, or one the bucket refuses as full (past the margin above its
// soft bound), ends the task failed instead: the end is kept.
func (rs taskResults) end(ctx context.Context, session, user, id string, result json.RawMessage, change func(*taskRecord)) (*taskRecord, error) {
	if len(result) > maxResult {
		result, change = nil, failedEnd("the result is larger than a task record holds")
	}
	key := userKey("o", session, user, id)
	if result != nil {
		r, err := rs.st.getTask(ctx, session, user, id)
		if err != nil || r.Status.IsTerminal() {
			return r, err
		}
		switch err := rs.st.put(ctx, key, result, false); {
		case store.IsFull(err):
			result, change = nil, failedEnd("the result could not be kept: the bucket of MCP tasks is full")
		case err != nil:
			return nil, err
		default:
			rs.st.bound.Grew(len(key) + len(result)) // new tasks see it before the next read
		}
	}
	r, err := rs.st.updateTask(ctx, session, user, id, change)
	lost := errors.Is(err, errNotFound) || (err == nil && (r.Status != mcp.TaskStatusCompleted || r.Result != nil))
	if result != nil && lost {
		rs.st.delete(ctx, key)
	}
	return r, err
}

// failedEnd ends a task failed for why, its result in the session's events.
func failedEnd(why string) func(*taskRecord) {
	return func(r *taskRecord) {
		r.Status, r.Error = mcp.TaskStatusFailed, why+"; it is in the session's events (call "+r.CallID+")"
	}
}

// load reads a completed record's result into r.Result (a record of an
// earlier facade holds it already).
func (rs taskResults) load(ctx context.Context, r *taskRecord) error {
	if r.Status != mcp.TaskStatusCompleted || r.Result != nil {
		return nil
	}
	return rs.st.get(ctx, userKey("o", r.Session, r.User, r.ID), &r.Result)
}

// watchTask waits until the record is terminal (or gone), or ctx ends.
func (st *kvStore) watchTask(ctx context.Context, session, user, id string) (*taskRecord, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes, err := st.watchChanges(ctx, session, user)
	if err != nil {
		return nil, err
	}
	ended := func(r *taskRecord) bool { return r == nil || r.Status.IsTerminal() }
	r, err := st.getTask(ctx, session, user, id)
	if err != nil || ended(r) {
		return r, err // errNotFound: deleted since the caller read it
	}
	st.follow(ctx, session, user, changes, func() []string { return []string{id} }, func(_ string, c *taskRecord) bool {
		r = c
		return !ended(r)
	})
	switch {
	case r == nil:
		return nil, errNotFound
	case r.Status.IsTerminal():
		return r, nil
	}
	return nil, ctx.Err()
}

// follow calls seen with the record (nil: gone) of each of ids() as the
// bucket holds it, read again on every write of the (session, user)'s task
// records and every listenReread, until seen returns false or ctx or
// changes end. A write's message is news, never the record: subscribers
// get it before the stream stores it, and get it too when the stream
// refuses it (a compare-and-set that lost); the subscription drops bursts
// and a replica may lag (TestTasksTwoFacades, TestTaskRefusedWrite).
func (st *kvStore) follow(ctx context.Context, session, user string, changes <-chan string, ids func() []string,
	seen func(id string, r *taskRecord) bool) {
	again := time.NewTicker(listenReread)
	defer again.Stop()
	reread := func(id string) bool { // a read that fails is tried again at the next tick
		r, err := st.getTask(ctx, session, user, id)
		return (err != nil && !errors.Is(err, errNotFound)) || seen(id, r)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case id, ok := <-changes:
			if !ok || (slices.Contains(ids(), id) && !reread(id)) {
				return
			}
		case <-again.C:
			for _, id := range ids() {
				if !reread(id) {
					return
				}
			}
		}
	}
}

// watchChanges yields the id of every write of the (session, user)'s task
// records until ctx ends, by subscription (a KV watch would create a
// consumer); bursts past its buffer are dropped.
func (st *kvStore) watchChanges(ctx context.Context, session, user string) (<-chan string, error) {
	prefix, err := st.subject(ctx, userKey("t", session, user, ""))
	if err != nil {
		return nil, err
	}
	out := make(chan string, 64)
	each := func(m *nats.Msg) bool {
		select {
		case out <- strings.TrimPrefix(m.Subject, prefix):
			return true
		case <-ctx.Done():
			return false
		}
	}
	if err := bus.Listen(ctx, st.nc, prefix+"*", 64, each, func() { close(out) }); err != nil {
		return nil, fmt.Errorf("%w: %v", errNoStore, err)
	}
	return out, nil
}

// kvDeleted reports whether m, a KV key's write, deletes or purges it.
func kvDeleted(m *nats.Msg) bool {
	op := m.Header.Get("KV-Operation")
	return op == "DEL" || op == "PURGE"
}

// A subscriptions/listen naming task ids is served here, since mcp-go drops
// taskIds (docs/mcp.md "Task notifications on subscriptions/listen").

const (
	methodSubscriptionsListen = string(mcp.MethodSubscriptionsListen)
	methodTaskNotification    = "notifications/tasks"
	tasksExtension            = "io.modelcontextprotocol/tasks"
	codeMissingCapability     = -32021 // Missing Required Client Capability
	// maxListens bounds the listen streams of tasks one facade process
	// serves at once; listenReread is how often a stream reads its live
	// tasks again (a write the subscription dropped, a replica behind).
	maxListens   = 1000
	listenReread = time.Second
	// maxListenIDs bounds the task ids one listen agrees to (the default
	// MaxTasks: every live task of a (session, user)).
	maxListenIDs = DefaultMaxTasks
)

// missingTasksCapability is the data of a -32021 error.
var missingTasksCapability = map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}}}

// listenParams are what the facade reads of a subscriptions/listen.
type listenParams struct {
	Notifications struct {
		TaskIDs []string `json:"taskIds"`
	} `json:"notifications"`
	Meta map[string]json.RawMessage `json:"_meta"`
}

// listensForTasks reports whether a subscriptions/listen names task ids.
func listensForTasks(params json.RawMessage) bool {
	var p listenParams
	return json.Unmarshal(params, &p) == nil && len(p.Notifications.TaskIDs) > 0
}

func (p *listenParams) declaresTasks() bool {
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if json.Unmarshal(p.Meta[mcp.MetaKeyClientCapabilities], &caps) != nil {
		return false
	}
	_, ok := caps.Extensions[tasksExtension]
	return ok
}

// streamKey carries, in a request's context, how a message is written on
// the request's own stream (SSE events, or the stdio output).
type streamKey struct{}

func withStream(ctx context.Context, send func([]byte) error) context.Context {
	return context.WithValue(ctx, streamKey{}, send)
}

// serveStream answers m over HTTP as a stream of server-sent events: the
// messages answer sends on the stream, then its response.
func serveStream(ctx context.Context, w http.ResponseWriter, m *rpcMessage, answer func(context.Context, *rpcMessage) []byte) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	var mu sync.Mutex
	send := func(msg []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if _, err := fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg); err != nil {
			return err
		}
		if fl != nil {
			fl.Flush()
		}
		return nil
	}
	_ = send(answer(withStream(ctx, send), m))
}

// listen serves a subscriptions/listen naming task ids: it acknowledges
// those of this session and user, sends each state now and on every change,
// and ends when they all ended, the request ends or the facade closes.
func (s *taskFront) listen(ctx context.Context, m *rpcMessage) (any, *rpcError) {
	var p listenParams
	if err := json.Unmarshal(m.Params, &p); err != nil {
		return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: err.Error()}
	}
	if !p.declaresTasks() {
		return nil, &rpcError{Code: codeMissingCapability, Message: "Missing required client capability: task notifications need the " + tasksExtension + " extension",
			Data: missingTasksCapability}
	}
	send, _ := ctx.Value(streamKey{}).(func([]byte) error)
	if send == nil {
		return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: "subscriptions/listen: no stream to send on"}
	}
	select { // a place of the maxListens listen streams
	case s.runners.listens <- struct{}{}:
		defer func() { <-s.runners.listens }()
	default:
		return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: fmt.Sprintf("this facade process serves %d task subscriptions already (the most)", maxListens)}
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	context.AfterFunc(s.runners.closing, stop)
	changes, err := s.store.watchChanges(ctx, s.session, s.user) // before the reads: no write is missed
	if err != nil {
		return nil, storeError(err)
	}
	meta := map[string]any{mcp.MetaKeySubscriptionID: m.ID}
	notify := func(r *taskRecord) {
		_ = taskResults{s.store}.load(ctx, r) // without it (gone meanwhile) the notification still says the task ended
		v := r.detailed(true)
		v.Meta = meta
		msg, _ := json.Marshal(map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "method": methodTaskNotification, "params": v})
		_ = send(msg)
	}
	seen := map[string]*taskRecord{}
	agreed := []string{}
	for _, id := range p.Notifications.TaskIDs {
		if _, dup := seen[id]; dup || len(agreed) == maxListenIDs {
			continue
		}
		r, err := s.store.getTask(ctx, s.session, s.user, id)
		if err != nil {
			continue // not this session's and user's task (or gone): not agreed
		}
		seen[id] = r
		agreed = append(agreed, id)
	}
	ack, _ := json.Marshal(map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "method": mcp.MethodNotificationSubscriptionsAcknowledged,
		"params": map[string]any{"notifications": map[string]any{"taskIds": agreed}, "_meta": meta}})
	if send(ack) != nil {
		return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: "subscriptions/listen: the stream is closed"}
	}
	for _, id := range agreed {
		r := seen[id]
		notify(r)
		if !r.Status.IsTerminal() {
			s.runners.follow(r) // a task nobody runs any more learns its end from the bus
		}
	}
	live := func() []string {
		var ids []string
		for _, id := range agreed {
			if last := seen[id]; last != nil && !last.Status.IsTerminal() {
				ids = append(ids, id)
			}
		}
		return ids
	}
	if len(live()) > 0 {
		// What a live task's record holds now is sent when it is news.
		s.store.follow(ctx, s.session, s.user, changes, live, func(id string, r *taskRecord) bool {
			switch last := seen[id]; {
			case last == nil || last.Status.IsTerminal(): // not agreed, or said all already
			case r == nil: // deleted: nothing more to say
				seen[id] = nil
			case r.Status != last.Status || !r.Updated.Equal(last.Updated):
				seen[id] = r
				notify(r)
			}
			return len(live()) > 0
		})
	}
	return map[string]any{"_meta": meta}, nil
}
