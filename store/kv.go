package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/replies"
)

// KV is a bucket whose Get returns the latest acknowledged write: a
// replicated bucket is read from its stream leader, through the stream's
// message-get API, since a direct get may be a lagging follower's
// (docs/store.md, "leader reads"). Every other method is the bucket's own.
type KV struct {
	jetstream.KeyValue
	nc     *nats.Conn
	get    string       // the leader's message-get subject, "" for direct gets
	msgGet string       // the stream's message-get subject (Latest), whatever the replicas
	prefix string       // "$KV.<bucket>."
	cas    bool         // writes may go to prefix+key (no domain or API prefix): kvwrite.go
	acks   *replies.Mux // the replies to those writes (internal/replies)
	bound  *Bound       // the soft bound Setup gave the bucket (BoundOf)
	count  *Count       // the bound Setup gave its names (CountOf)
}

// NewKV wraps kv. replicas is the bucket's replica count.
func NewKV(js jetstream.JetStream, kv jetstream.KeyValue, replicas int) *KV {
	k := &KV{KeyValue: kv, nc: js.Conn(), prefix: "$KV." + kv.Bucket() + ".", cas: APIPrefix(js) == jetstream.DefaultAPIPrefix}
	k.acks = replies.New(k.nc, replies.Options{KeepInbox: true})
	k.msgGet = APIPrefix(js) + "STREAM.MSG.GET.KV_" + kv.Bucket()
	if replicas > 1 {
		k.get = k.msgGet
	}
	return k
}

// OpenKV wraps kv (NewKV) with the replica count its stream has.
func OpenKV(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) (*KV, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, err
	}
	replicas := 1
	if b, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		replicas = b.StreamInfo().Config.Replicas
	}
	return NewKV(js, kv, replicas), nil
}

// APIPrefix is the subject prefix of js's JetStream API requests, ending
// in a dot.
func APIPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// Get returns the latest value of key, read from the stream leader on a
// replicated bucket (asked again through an election, up to readBudget);
// jetstream.ErrKeyNotFound when it is absent, deleted or purged.
func (k *KV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if k.get == "" {
		return k.KeyValue.Get(ctx, key)
	}
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	e, err := k.leaderGet(actx, key)
	cancel()
	if err == nil || !IsTransient(err) || ctx.Err() != nil {
		return e, err
	}
	err = Retry(ctx, Policy{Budget: readBudget}, func(ctx context.Context) (err error) {
		e, err = k.leaderGet(ctx, key) // not found is neither transient nor a conflict: Retry ends on it
		return err
	})
	return e, err
}

// readBudget bounds the retries of a read from a replicated bucket.
const readBudget = 15 * time.Second

func (k *KV) leaderGet(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := k.message(ctx, k.get, MsgGetRequest{LastBySubject: k.prefix + key})
	switch {
	case err != nil:
		return nil, err
	case e.op != jetstream.KeyValuePut:
		return nil, jetstream.ErrKeyNotFound
	}
	return e, nil
}

// LastRevision is the stream sequence of the last write to a key matching
// filter, deletes included, as the leader holds it (0: none): a Watch that
// has Reached it holds every write acknowledged before the call.
func (k *KV) LastRevision(ctx context.Context, filter string) (uint64, error) {
	m, err := MsgGet(ctx, k.nc, k.msgGet, MsgGetRequest{LastBySubject: k.prefix + filter})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Sequence, nil
}

// Latest returns the latest value of every key matching filter (a key
// with wildcards), deleted and purged keys left out, read from the stream
// leader one message at a time (a key listing's consumer may be a lagging
// follower's): one request per message of the matching keys, plus one.
func (k *KV) Latest(ctx context.Context, filter string) ([]jetstream.KeyValueEntry, error) {
	var (
		latest = map[string]*entry{}
		seq    uint64
	)
	for {
		var e *entry
		err := Retry(ctx, Policy{Budget: readBudget}, func(ctx context.Context) (err error) { // each attempt bounded
			e, err = k.message(ctx, k.msgGet, MsgGetRequest{Seq: seq, NextBySubject: k.prefix + filter})
			return err
		})
		if IsNotFound(err) {
			break
		}
		if err != nil {
			return nil, err
		}
		latest[e.key] = e
		seq = e.rev + 1
	}
	out := make([]jetstream.KeyValueEntry, 0, len(latest))
	for _, e := range latest {
		if e.op == jetstream.KeyValuePut {
			out = append(out, e)
		}
	}
	return out, nil
}

// MsgGetRequest is a request of a stream's message-get API
// (<API prefix>STREAM.MSG.GET.<stream>, which only the stream's leader
// answers): the message at Seq, or the last or next (from Seq) on a subject.
type MsgGetRequest struct {
	Seq           uint64 `json:"seq,omitempty"`
	LastBySubject string `json:"last_by_subj,omitempty"`
	NextBySubject string `json:"next_by_subj,omitempty"`
}

// StreamMsg is a message the message-get API returns.
type StreamMsg struct {
	Subject  string    `json:"subject"`
	Sequence uint64    `json:"seq"`
	Header   []byte    `json:"hdrs"`
	Data     []byte    `json:"data"`
	Time     time.Time `json:"time"`
}

// MsgGet asks the message-get API at subject for one message. A refusal
// is JetStream's *jetstream.APIError (errors.Is jetstream.ErrMsgNotFound
// when there is no such message).
func MsgGet(ctx context.Context, nc *nats.Conn, subject string, r MsgGetRequest) (*StreamMsg, error) {
	req, _ := json.Marshal(r)
	m, err := nc.RequestWithContext(ctx, subject, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *StreamMsg          `json:"message"`
	}
	switch err := json.Unmarshal(m.Data, &resp); {
	case err != nil:
		return nil, fmt.Errorf("%s: a bad JetStream reply: %w", subject, err)
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, fmt.Errorf("%s: an empty JetStream reply", subject)
	}
	return resp.Message, nil
}

// message asks the message-get API at subject for one message's entry.
func (k *KV) message(ctx context.Context, subject string, r MsgGetRequest) (*entry, error) {
	m, err := MsgGet(ctx, k.nc, subject, r)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, jetstream.ErrKeyNotFound
	}
	if err != nil {
		return nil, err
	}
	e := &entry{bucket: k.Bucket(), key: strings.TrimPrefix(m.Subject, k.prefix), value: m.Data,
		rev: m.Sequence, created: m.Time, op: jetstream.KeyValuePut}
	if len(m.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(m.Header)
		if err != nil {
			return nil, fmt.Errorf("store: get %s: %w", e.key, err)
		}
		switch h.Get("KV-Operation") {
		case "DEL": // an entry, not ErrKeyNotFound: Latest reads on past it
			e.op = jetstream.KeyValueDelete
		case "PURGE":
			e.op = jetstream.KeyValuePurge
		}
	}
	return e, nil
}

// entry is a KV value read by KV.Get from the stream leader.
type entry struct {
	bucket, key string
	value       []byte
	rev         uint64
	created     time.Time
	op          jetstream.KeyValueOp
}

func (e *entry) Bucket() string                  { return e.bucket }
func (e *entry) Key() string                     { return e.key }
func (e *entry) Value() []byte                   { return e.value }
func (e *entry) Revision() uint64                { return e.rev }
func (e *entry) Created() time.Time              { return e.created }
func (e *entry) Delta() uint64                   { return 0 }
func (e *entry) Operation() jetstream.KeyValueOp { return e.op }

var _ jetstream.KeyValueEntry = (*entry)(nil)

// IsNotFound reports whether err says a KV key is absent or deleted.
func IsNotFound(err error) bool {
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)
}

// IsConflict reports whether err says a compare-and-set write lost (10071
// on a single-replica stream, 10164 on a replicated one).
func IsConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// IsTransient reports whether err may go away if the same operation is
// tried again (docs/store.md): not conflicts, missing keys, bad requests or
// a closed connection.
func IsTransient(err error) bool {
	if err == nil || IsConflict(err) || IsNotFound(err) || IsMaxMsgs(err) {
		return false
	}
	// A message above the payload limit is refused however often it is
	// sent (retrying it kept a batch with too large a batch.done stuck).
	if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrMaxPayload) ||
		errors.Is(err, jetstream.ErrInvalidKey) || errors.Is(err, context.Canceled) {
		return false
	}
	if _, ok := errors.AsType[*json.SyntaxError](err); ok {
		return false
	}
	if apiErr, ok := errors.AsType[*jetstream.APIError](err); ok { // 408 and 5xx; a 4xx fails however often it is sent
		return apiErr.Code == 408 || apiErr.Code >= 500
	}
	return true
}

// Policy bounds how a write is retried on conflicts and transient errors.
type Policy struct {
	// Budget is how long the write keeps trying; zero means until the
	// context ends.
	Budget time.Duration
	// RideOutFull keeps trying through a full store (IsFull); without it
	// such a refusal ends the write at once.
	RideOutFull bool
}

var (
	// Bounded is for writes a caller can report as failed: a session
	// update, a registration, a park. It rides out a leader election.
	Bounded = Policy{Budget: 20 * time.Second}
	// UntilLanded is for writes that end a call (a recorded result, an
	// answer): retried for as long as the caller's context lasts.
	UntilLanded = Policy{RideOutFull: true}
	// Provision is for creating buckets and streams at start, through a
	// forming cluster's "insufficient resources".
	Provision = Policy{Budget: 20 * time.Second, RideOutFull: true}
)

// attemptTimeout bounds one JetStream request inside a retried write.
const attemptTimeout = 5 * time.Second

// ErrNoChange may be returned by an Update function to leave the key as it
// is; Update then returns the current revision and no error.
var ErrNoChange = errors.New("store: no change")

// Update writes the value that fn derives from the latest value of key (nil
// when absent), with compare-and-set on the revision it read, retrying with
// a fresh read and fn again after a conflict or a transient error, within
// the policy. A write whose acknowledgement was lost is recognised on the
// next read and counts as landed. An error from fn ends Update, nothing
// written. It returns the revision of the value now stored.
func Update(ctx context.Context, kv jetstream.KeyValue, key string, p Policy, fn func(cur jetstream.KeyValueEntry) ([]byte, error)) (uint64, error) {
	var sent []byte // the value of an attempt whose outcome is unknown
	return retry(ctx, p, func(ctx context.Context) (uint64, error) {
		cur, err := kv.Get(ctx, key)
		if IsNotFound(err) {
			cur, err = nil, nil
		}
		if err != nil {
			return 0, err
		}
		if sent != nil && cur != nil && bytes.Equal(cur.Value(), sent) {
			return cur.Revision(), nil
		}
		next, err := fn(cur)
		if errors.Is(err, ErrNoChange) {
			if cur == nil {
				return 0, nil
			}
			return cur.Revision(), nil
		}
		if err != nil {
			return 0, permanent{err}
		}
		var rev uint64
		if cur == nil {
			rev, err = kv.Create(ctx, key, next)
		} else {
			rev, err = kv.Update(ctx, key, next, cur.Revision())
		}
		if IsTransient(err) {
			sent = next
		}
		return rev, err
	})
}

// Create stores value under key when the key is absent, retrying transient
// errors within the policy. It returns an error satisfying IsConflict when
// the key holds another value (a create whose acknowledgement was lost is
// recognised as landed).
func Create(ctx context.Context, kv jetstream.KeyValue, key string, value []byte, p Policy) (uint64, error) {
	return Update(ctx, kv, key, p, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		if cur != nil {
			return nil, fmt.Errorf("store: create %s: %w", key, jetstream.ErrKeyExists)
		}
		return value, nil
	})
}

// Delete removes key with compare-and-set on the revision it reads, and
// returns the revision of the value it deleted (0: none), for caches'
// tombstones.
func Delete(ctx context.Context, kv jetstream.KeyValue, key string, p Policy) (uint64, error) {
	var tried uint64 // the revision of an attempt whose outcome is unknown
	return retry(ctx, p, func(ctx context.Context) (uint64, error) {
		e, err := kv.Get(ctx, key)
		if IsNotFound(err) {
			return tried, nil // nothing there, or the lost attempt landed
		}
		if err != nil {
			return 0, err
		}
		err = kv.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
		if err == nil {
			return e.Revision(), nil
		}
		if IsTransient(err) {
			tried = e.Revision()
		}
		return 0, err
	})
}

// permanent marks an error that ends a retry at once.
type permanent struct{ err error }

// Permanent marks err, returned by an attempt of Retry, as one that ends
// the retry at once (an error Retry does not know is tried again).
func Permanent(err error) error { return permanent{err} }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Retry runs fn until it returns nil, an error that is neither a conflict
// nor transient, or the policy's budget or ctx runs out, waiting a little
// longer after each failure. Each attempt's context is bounded by 5 s.
func Retry(ctx context.Context, p Policy, fn func(context.Context) error) error {
	_, err := retry(ctx, p, func(ctx context.Context) (uint64, error) { return 0, fn(ctx) })
	return err
}

// retry runs attempt until it succeeds, fails with an error that is neither
// a conflict nor transient (nor full, under RideOutFull), or the budget or
// ctx ends; waits between attempts grow from 10 ms to 1 s, with jitter.
func retry(ctx context.Context, p Policy, attempt func(context.Context) (uint64, error)) (uint64, error) {
	var deadline time.Time
	if p.Budget > 0 {
		deadline = time.Now().Add(p.Budget)
	}
	wait := 10 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		rev, err := attempt(actx)
		cancel()
		var perm permanent
		switch {
		case err == nil:
			return rev, nil
		case errors.As(err, &perm):
			return 0, perm.err
		case !p.RideOutFull && IsFull(err):
			return 0, err
		case ctx.Err() != nil:
			return 0, fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case !IsConflict(err) && !IsTransient(err) && !IsFull(err): // full: ridden out (the account's limit is a 400)
			return 0, err
		case !deadline.IsZero() && time.Now().Add(wait).After(deadline):
			return 0, fmt.Errorf("store: gave up after %v: %w", p.Budget, err)
		}
		if IsConflict(err) { // a lost race: again at once, but for a little jitter
			wait = 0
		}
		if bus.Sleep(ctx, wait+rand.N(wait/2+time.Millisecond)) != nil {
			return 0, fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		}
		wait = min(max(2*wait, 10*time.Millisecond), time.Second)
	}
}
