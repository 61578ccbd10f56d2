// Package store owns the JetStream side of toolbus: the buckets and streams
// of docs/protocol.md section 8, the one compare-and-set helper every
// read-modify-write goes through, reads that see the latest acknowledged
// write on a replicated bucket, and the watch that feeds every cache.
package store

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolbus/toolbus/bus"
)

// Config sizes the JetStream buckets and streams of one deployment.
type Config struct {
	// Replicas of every bucket and stream; zero means 1 (3 on a cluster).
	Replicas int
	// Heartbeat of workers; liveness entries expire after three missed
	// beats. Zero means bus.DefaultHeartbeat.
	Heartbeat time.Duration
	// DedupeWindow is how long recorded results stay in the ledger; zero
	// means bus.DefaultDedupeWindow.
	DedupeWindow time.Duration
	// SessionTTL is the idle time after which a session is forgotten; zero
	// means bus.DefaultSessionTTL.
	SessionTTL time.Duration
	// EventsMaxAge bounds how long session events are kept; zero means
	// bus.DefaultEventsMaxAge.
	EventsMaxAge time.Duration
	// EventsMaxBytes bounds the bytes the events stream keeps (the oldest
	// events go first; JetStream reserves it on each server); zero means
	// DefaultEventsMaxBytes, negative no bound but EventsMaxAge.
	EventsMaxBytes int64
	// OutputsTTL is how long a stored output (docs/protocol.md 5.9) is kept;
	// zero means bus.DefaultOutputsTTL.
	OutputsTTL time.Duration
	// OutputsMaxBytes bounds the outputs object store's bytes (when full,
	// a new output is refused; JetStream reserves the bound on each server).
	// Zero or negative means the default bound by messages, which reserves
	// nothing: at most DefaultOutputsMaxMsgs of OutputsMaxMsgSize each.
	OutputsMaxBytes int64
	// ParkedMaxBytes, SessionsMaxBytes and LedgerMaxBytes are the soft
	// bounds of P_parked, P_sessions and P_ledger (Bound; their streams'
	// max_bytes is HardBytes, reserved on each server): a new key past one
	// is refused. Zero means the Default*MaxBytes, negative no bound.
	ParkedMaxBytes, SessionsMaxBytes, LedgerMaxBytes int64
	// TasksMaxBytes and MCPMaxBytes are those of P_tasks (tasks.Setup) and
	// P_mcp (its max_bytes here; the facades refuse at the soft bound).
	TasksMaxBytes, MCPMaxBytes int64
	// MCPRefusals, shared with the MCP facade the process serves
	// (facade.Config.Refusals), are the refusals Bounds shows for P_mcp;
	// nil: none.
	MCPRefusals *Refusals
	// MaxTools and MaxGroups bound the names of P_tools and P_groups (Count;
	// their streams' max_msgs is HardMsgs): a new one past it is refused.
	// Zero means DefaultMaxTools and DefaultMaxGroups, negative no bound.
	MaxTools, MaxGroups int
	// HandoffMaxAge bounds how long external and confirm requests are kept;
	// zero means bus.DefaultHandoffTTL.
	HandoffMaxAge time.Duration
	// WorkAckWait is how long a durable call's worker may go without
	// reporting progress before the call is delivered to another worker;
	// zero means DefaultWorkAckWait. Workers report every third of it.
	WorkAckWait time.Duration
	// Memory, when true, keeps everything in memory instead of files.
	Memory bool
	// EventsMemory keeps only the events stream in memory (two writes per
	// call); parked calls, sessions and the ledger stay on disk.
	EventsMemory bool
}

func (c *Config) defaults() {
	c.Replicas = positive(c.Replicas, 1)
	c.Heartbeat = positive(c.Heartbeat, bus.DefaultHeartbeat)
	c.DedupeWindow = positive(c.DedupeWindow, bus.DefaultDedupeWindow)
	c.SessionTTL = positive(c.SessionTTL, bus.DefaultSessionTTL)
	c.EventsMaxAge = positive(c.EventsMaxAge, bus.DefaultEventsMaxAge)
	c.HandoffMaxAge = positive(c.HandoffMaxAge, bus.DefaultHandoffTTL)
	c.OutputsTTL = positive(c.OutputsTTL, bus.DefaultOutputsTTL)
	c.EventsMaxBytes = max(cmp.Or(c.EventsMaxBytes, DefaultEventsMaxBytes), -1)
	c.OutputsMaxBytes = positive(c.OutputsMaxBytes, -1)
	c.ParkedMaxBytes = cmp.Or(c.ParkedMaxBytes, DefaultParkedMaxBytes)
	c.SessionsMaxBytes = cmp.Or(c.SessionsMaxBytes, DefaultSessionsMaxBytes)
	c.LedgerMaxBytes = cmp.Or(c.LedgerMaxBytes, DefaultLedgerMaxBytes)
	c.MCPMaxBytes = cmp.Or(c.MCPMaxBytes, DefaultMCPMaxBytes)
	c.WorkAckWait = positive(c.WorkAckWait, DefaultWorkAckWait)
	c.MaxTools = cmp.Or(c.MaxTools, DefaultMaxTools)
	c.MaxGroups = cmp.Or(c.MaxGroups, DefaultMaxGroups)
}

// positive returns v when it is positive, else def.
func positive[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// The outputs bucket's bounds (docs/protocol.md 5.9): every message is a
// chunk of at most 128 KiB (offload.ChunkSize, nats.go's default) or the
// metadata, so a message of OutputsMaxMsgSize leaves 8 KiB for headers; and
// without a byte bound the bucket keeps DefaultOutputsMaxMsgs messages,
// about 4.25 GiB, refusing new ones past it.
const (
	OutputsMaxMsgSize     = 136 << 10
	DefaultOutputsMaxMsgs = 32 << 10
)

// DefaultEventsMaxBytes is Config.EventsMaxBytes's default (protocol 1.23):
// what a flood of calls may fill of the store with events (about 470 bytes
// a read-only batch) before the oldest go.
const DefaultEventsMaxBytes = 1 << 30

// The soft bounds' defaults (Config.ParkedMaxBytes..., protocol 1.24).
// P_tasks's records hold a call's input and result, as P_parked's and
// P_ledger's do; P_mcp's 256 MiB holds two (session, user)s' MaxTasks of
// 1 MiB results, or thousands of tasks of a few KiB (docs/mcp.md).
const (
	DefaultParkedMaxBytes   = 512 << 20
	DefaultSessionsMaxBytes = 128 << 20
	DefaultLedgerMaxBytes   = 512 << 20
	DefaultTasksMaxBytes    = 512 << 20
	DefaultMCPMaxBytes      = 256 << 20
)

// DefaultWorkAckWait is Config.WorkAckWait's default.
const DefaultWorkAckWait = 30 * time.Second

// Store holds the JetStream resources of one deployment.
type Store struct {
	JS           jetstream.JetStream
	Tools        *KV
	Workers      *KV
	Groups       *KV
	Sessions     *KV
	Parked       *KV
	Ledger       *KV
	Routers      *KV // the routers' presence (docs/protocol.md 8)
	MCP          *KV // the MCP facades' (they write it; routers show its bound, Bounds)
	Events       jetstream.Stream
	ParkedStream jetstream.Stream // under Parked: the handoff's (docs/protocol.md 6.2)
	Work         jetstream.Stream // durable calls, a work queue
	Skills       jetstream.ObjectStore
	Outputs      jetstream.ObjectStore
	Health       *Health // what this process has seen of the store's space (docs/protocol.md 9)

	subj        bus.Subjects
	workAckWait time.Duration
}

// HardBytesFor is HardBytes(soft), raised above what the bucket already holds
// when it holds more (a bucket of a router before 1.24, or a bound made
// smaller): a max_bytes below it would refuse the writes of the keys it
// holds (answers, cancels, expiries, a session's mode) until its TTL drains
// it. Its soft bound refuses new keys meanwhile, and a later Setup lowers
// the hard one.
func HardBytesFor(ctx context.Context, js jetstream.JetStream, stream string, soft int64) int64 {
	hard := HardBytes(soft)
	if soft > 0 {
		if st, err := js.Stream(ctx, stream); err == nil {
			if held := int64(st.CachedInfo().State.Bytes); held+BoundMargin > hard {
				return held + BoundMargin
			}
		}
	}
	return hard
}

// CreateBounded creates or updates cfg's bucket, its soft bound soft (Bound;
// 0 none, and cfg's MaxBytes kept; negative none) and its max_bytes
// HardBytes of it (HardBytesFor), and returns it with that bound (BoundOf).
func CreateBounded(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, soft int64) (*KV, error) {
	if soft != 0 {
		cfg.MaxBytes = HardBytesFor(ctx, js, "KV_"+cfg.Bucket, soft)
	}
	h, err := provision(ctx, func(ctx context.Context) (jetstream.KeyValue, error) { return js.CreateOrUpdateKeyValue(ctx, cfg) })
	if IsFull(err) && soft > 0 { // reserved like a stream's (Setup)
		err = fmt.Errorf("%w (max_bytes is %d bytes, a soft bound of %d: set a smaller one)", err, cfg.MaxBytes, soft)
	}
	if err != nil {
		return nil, fmt.Errorf("store: bucket %s: %w", cfg.Bucket, err)
	}
	kv := NewKV(js, h, cfg.Replicas)
	kv.bound = NewBound(ctx, h, soft)
	return kv, nil
}

// Setup creates or updates the buckets and streams of docs/protocol.md section 8
// for the deployment named by s. It is idempotent and safe to run from every
// router at once.
func Setup(ctx context.Context, js jetstream.JetStream, s bus.Subjects, cfg Config) (*Store, error) {
	cfg.defaults()
	storage := StorageOf(cfg.Memory)
	st := &Store{JS: js, Health: &Health{}}
	kvs := []struct {
		dst   **KV
		name  string
		cfg   jetstream.KeyValueConfig
		soft  int64 // the soft bound (Bound), 0: none
		names *Count
	}{
		{&st.Tools, bus.BucketTools, jetstream.KeyValueConfig{Description: "toolbus tool definitions"}, 0, newCount("tools", "max-tools", cfg.MaxTools)},
		{&st.Workers, bus.BucketWorkers, jetstream.KeyValueConfig{Description: "toolbus worker liveness", TTL: 3 * cfg.Heartbeat}, 0, nil},
		{&st.Groups, bus.BucketGroups, jetstream.KeyValueConfig{Description: "toolbus tool groups"}, 0, newCount("groups", "max-groups", cfg.MaxGroups)},
		{&st.Sessions, bus.BucketSessions, jetstream.KeyValueConfig{Description: "toolbus sessions", TTL: cfg.SessionTTL}, cfg.SessionsMaxBytes, nil},
		{&st.Parked, bus.BucketParked, jetstream.KeyValueConfig{Description: "toolbus parked calls", TTL: cfg.HandoffMaxAge}, cfg.ParkedMaxBytes, nil},
		{&st.Ledger, bus.BucketLedger, jetstream.KeyValueConfig{Description: "toolbus dedupe ledger", TTL: cfg.DedupeWindow}, cfg.LedgerMaxBytes, nil},
		// One small key per router (docs/protocol.md 8, 1.13), at most 1 MiB.
		{&st.Routers, bus.BucketRouters, jetstream.KeyValueConfig{Description: "toolbus router presence", TTL: 3 * cfg.Heartbeat,
			MaxValueSize: 256, MaxBytes: 1 << 20}, 0, nil},
		// The MCP facades' tasks and request states (docs/mcp.md).
		{&st.MCP, bus.BucketMCP, MCPConfig(s, cfg.Replicas, storage), cfg.MCPMaxBytes, nil},
	}
	for _, kv := range kvs {
		kv.cfg.Bucket, kv.cfg.Replicas, kv.cfg.Storage = s.Bucket(kv.name), cfg.Replicas, storage
		k, err := CreateBounded(ctx, js, kv.cfg, kv.soft)
		if err != nil {
			return nil, err
		}
		if kv.dst != nil {
			*kv.dst, k.count = k, kv.names
		}
		if kv.dst == &st.MCP {
			k.bound.Counting(cfg.MCPRefusals)
		}
		if kv.names != nil {
			if err := kv.names.capMsgs(ctx, js, k.KeyValue); err != nil {
				return nil, fmt.Errorf("store: bucket %s: max_msgs: %w", kv.cfg.Bucket, err)
			}
		}
	}
	var err error
	// The parked records are the handoff (docs/protocol.md 6.2, 1.6).
	if st.ParkedStream, err = provision(ctx, func(ctx context.Context) (jetstream.Stream, error) {
		return js.Stream(ctx, "KV_"+s.Bucket(bus.BucketParked))
	}); err != nil {
		return nil, fmt.Errorf("store: bucket %s: %w", s.Bucket(bus.BucketParked), err)
	}
	eventsStorage := storage
	if cfg.EventsMemory {
		eventsStorage = jetstream.MemoryStorage
	}
	outputs := s.ObjectStore(bus.ObjectOutputs)
	outputsMsgs := int64(DefaultOutputsMaxMsgs)
	if cfg.OutputsMaxBytes > 0 {
		outputsMsgs = -1 // the operator's byte bound instead
	}
	streams := []struct {
		dst *jetstream.Stream
		cfg jetstream.StreamConfig
	}{
		{&st.Events, jetstream.StreamConfig{Name: s.Stream(bus.StreamEvents), Description: "toolbus session events",
			Subjects: []string{s.All("events")}, MaxAge: cfg.EventsMaxAge, MaxBytes: cfg.EventsMaxBytes, Storage: eventsStorage, Discard: jetstream.DiscardOld,
			Duplicates: min(cfg.DedupeWindow, cfg.EventsMaxAge)}}, // the dedupe window of docs/protocol.md 3.4
		// Durable calls wait here for a worker, until it acknowledges them;
		// the message id (the call key) dedupes a re-sent batch's publish.
		{&st.Work, jetstream.StreamConfig{Name: s.Stream(bus.StreamWork), Description: "toolbus durable calls waiting for a worker",
			Subjects: []string{s.All("work")}, Retention: jetstream.WorkQueuePolicy, MaxAge: cfg.DedupeWindow, Duplicates: cfg.DedupeWindow, Storage: storage}},
		// The outputs bucket: an object store's stream without rollups
		// (5.9), so that a writer can neither replace nor wipe another's
		// objects.
		{nil, jetstream.StreamConfig{Name: "OBJ_" + outputs, Description: "toolbus outputs too large to send inline",
			Subjects: []string{"$O." + outputs + ".C.>", "$O." + outputs + ".M.>"}, MaxAge: cfg.OutputsTTL, MaxBytes: cfg.OutputsMaxBytes,
			MaxMsgs: outputsMsgs, MaxMsgSize: OutputsMaxMsgSize,
			Storage: storage, Discard: jetstream.DiscardNew, AllowDirect: true}},
	}
	for _, x := range streams {
		x.cfg.Replicas = cfg.Replicas
		h, err := provision(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.CreateOrUpdateStream(ctx, x.cfg) })
		if IsFull(err) && x.cfg.MaxBytes > 0 { // JetStream reserves the bound on each server
			err = fmt.Errorf("%w (max_bytes is %d bytes: set a smaller one)", err, x.cfg.MaxBytes)
		}
		if err != nil {
			return nil, fmt.Errorf("store: stream %s: %w", x.cfg.Name, err)
		}
		if x.dst != nil {
			*x.dst = h
		}
	}
	st.workAckWait, st.subj = cfg.WorkAckWait, s
	if st.Skills, err = SkillsStore(ctx, js, s, cfg.Replicas); err != nil {
		return nil, err
	}
	if err = Retry(ctx, Bounded, func(ctx context.Context) (err error) {
		st.Outputs, err = js.ObjectStore(ctx, outputs)
		return err
	}); err != nil {
		return nil, fmt.Errorf("store: object store %s: %w", outputs, err)
	}
	return st, nil
}

// WorkConsumer creates (or keeps) the one shared pull consumer from which
// the workers of a durable tool take its calls (docs/protocol.md 5.8).
func (st *Store) WorkConsumer(ctx context.Context, tool string) error {
	cfg := jetstream.ConsumerConfig{
		Durable: st.subj.Workers.WorkConsumer(tool), Description: "toolbus workers of durable tool " + tool,
		FilterSubject: st.subj.Workers.Work(tool), AckPolicy: jetstream.AckExplicitPolicy, AckWait: st.workAckWait,
		MaxAckPending: 4096, MaxDeliver: -1, DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if _, err := provision(ctx, func(ctx context.Context) (jetstream.Consumer, error) { return st.Work.CreateOrUpdateConsumer(ctx, cfg) }); err != nil {
		return fmt.Errorf("store: work consumer for %s: %w", tool, err)
	}
	return nil
}

// provision returns what create makes, retried with the Provision policy.
func provision[T any](ctx context.Context, create func(context.Context) (T, error)) (T, error) {
	var v T
	err := Retry(ctx, Provision, func(ctx context.Context) (err error) {
		v, err = create(ctx)
		return err
	})
	return v, err
}

// SkillsStore creates or opens the skills object store.
func SkillsStore(ctx context.Context, js jetstream.JetStream, s bus.Subjects, replicas int) (jetstream.ObjectStore, error) {
	os, err := provision(ctx, func(ctx context.Context) (jetstream.ObjectStore, error) {
		return js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: s.ObjectStore(bus.ObjectSkills), Replicas: positive(replicas, 1)})
	})
	if err != nil {
		return nil, fmt.Errorf("store: object store %s: %w", s.ObjectStore(bus.ObjectSkills), err)
	}
	return os, nil
}

// StorageOf is memory storage for a deployment that keeps nothing on disk
// (the Memory settings of store, audit, limits and rcache), else file storage.
func StorageOf(memory bool) jetstream.StorageType {
	if memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// MCPConfig is the bucket of the MCP facades' task records and request
// states (docs/mcp.md): kept at most bus.MCPStateMaxAge, one revision per
// key, values up to 1 MiB. Routers create it (Setup); a facade that finds
// it missing creates it likewise.
func MCPConfig(s bus.Subjects, replicas int, storage jetstream.StorageType) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: s.Bucket(bus.BucketMCP), Description: "toolbus MCP facade tasks and request states",
		TTL: bus.MCPStateMaxAge, History: 1, MaxValueSize: 1 << 20, Replicas: positive(replicas, 1), Storage: storage}
}
