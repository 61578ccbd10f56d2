// Package audit is the audit trail: one record per tool call (who, what,
// decision, outcome, timing) in the P_AUDIT stream on P.audit.<session>.<tool>.
// See docs/guardrails.md and docs/operations.md "Audit to a SIEM".
package audit

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// Names after the deployment prefix.
const (
	Stream = "AUDIT" // P_AUDIT
	kind   = "audit" // P.audit.<session>.<tool>
)

// Defaults.
const (
	DefaultMaxAge = 30 * 24 * time.Hour
	// DefaultMaxBytes is Config.MaxBytes's default: what a flood of calls
	// may fill of the store before the trail refuses new records.
	DefaultMaxBytes = 1 << 30
	// DefaultMaxWait is Config.MaxWait's default.
	DefaultMaxWait = 30 * time.Second
	// MaxInput bounds the input a record carries; a larger one is left
	// out (its digest stays), so a record always fits a message.
	MaxInput     = 64 << 10
	dedupeWindow = 10 * time.Minute // a re-sent batch's results are not recorded twice
)

// Decision behaviors.
const (
	Allow      = "allow"      // ran (or was answered from the cache: Cached)
	Deny       = "deny"       // a rule, the mode or a person refused it
	Ask        = "ask"        // parked for a confirmation; Approver says who answered
	External   = "external"   // parked for an external handler
	Limit      = "limit"      // over a quota or rate limit
	Invalid    = "invalid"    // the input did not validate
	Unresolved = "unresolved" // unknown, inactive or unavailable tool
	Builtin    = "builtin"    // reset_tools, search_tools, the skill loader, request-scoped tools
	// Refused: a batch or query refused whole; no call id, Decision.Rule says why.
	Refused = "refused"
)

// Record is one audited call.
type Record struct {
	Time     time.Time `json:"time"`
	Router   string    `json:"router"`
	Session  string    `json:"session"`
	ReplyID  string    `json:"reply_id"`
	CallID   string    `json:"call_id"`
	User     string    `json:"user,omitempty"`
	NATSUser string    `json:"nats_user,omitempty"`
	Tool     string    `json:"tool"`
	// InputDigest is bus.InputDigest of the input, always; Input only
	// with Config.Inputs, redacted.
	InputDigest string          `json:"input_digest"`
	Input       json.RawMessage `json:"input,omitempty"`
	// InputOmitted says why Input is absent although inputs are recorded.
	InputOmitted string   `json:"input_omitted,omitempty"`
	Decision     Decision `json:"decision"`
	Outcome      Outcome  `json:"outcome"`
	DurationMS   int64    `json:"duration_ms"`
	// Suppressed counts the refusals of the same caller that were not
	// recorded since its previous refusal record (Refusals' rate bound).
	Suppressed int64 `json:"suppressed,omitempty"`
}

// Decision is how the call was decided.
type Decision struct {
	Behavior   string    `json:"behavior"`
	Mode       string    `json:"mode,omitempty"`
	Rule       string    `json:"rule,omitempty"` // the limit rule, or the permission engine's reason
	Cached     bool      `json:"cached,omitempty"`
	Approver   string    `json:"approver,omitempty"`
	AnsweredAt time.Time `json:"answered_at,omitzero"`
}

// Outcome is how the call ended.
type Outcome struct {
	State string `json:"state"`
	Code  string `json:"code,omitempty"`
}

// Config configures a Trail.
type Config struct {
	// MaxAge is how long records are kept; zero means DefaultMaxAge.
	MaxAge time.Duration `json:"max_age,omitempty"`
	// MaxBytes bounds the stream; zero means DefaultMaxBytes, negative no
	// bound but MaxAge. A full trail refuses new records (each counted lost
	// and logged in full by Stored's caller) and keeps every older one.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// Inputs records each call's input (redacted); otherwise only its digest.
	Inputs bool `json:"inputs,omitempty"`
	// Redact names input members (at any depth, case-insensitive) whose
	// values are replaced by "[redacted]" before a record is written.
	Redact []string `json:"redact,omitempty"`
	// MaxWait bounds a reply's wait for its records to be stored, then they
	// count as lost; zero means DefaultMaxWait (rides out an election).
	MaxWait time.Duration `json:"max_wait,omitempty"`
	// Replicas and Memory size the stream (from the store's config).
	Replicas int  `json:"-"`
	Memory   bool `json:"-"`
}

// Trail writes records. It is safe for concurrent use.
type Trail struct {
	pub  *store.Publisher
	subj bus.Subjects
	cfg  Config
}

// New creates (or updates) the audit stream, with a store.Publisher on nc.
func New(ctx context.Context, nc *nats.Conn, s bus.Subjects, cfg Config) (*Trail, error) {
	cfg.MaxAge = cmp.Or(max(cfg.MaxAge, 0), DefaultMaxAge)
	cfg.MaxBytes = max(cmp.Or(cfg.MaxBytes, DefaultMaxBytes), -1)
	cfg.MaxWait = cmp.Or(max(cfg.MaxWait, 0), DefaultMaxWait)
	pub, err := store.NewPublisher(nc, store.PublisherConfig{MaxWait: cfg.MaxWait})
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	js := pub.JetStream()
	err = store.Retry(ctx, store.Provision, func(ctx context.Context) error {
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: s.Stream(Stream), Description: "toolbus audit trail: one record per tool call",
			Subjects: []string{s.All(kind)}, MaxAge: cfg.MaxAge, MaxBytes: cfg.MaxBytes, Discard: jetstream.DiscardNew,
			Duplicates: dedupeWindow, Replicas: max(cfg.Replicas, 1), Storage: store.StorageOf(cfg.Memory),
		})
		return err
	})
	if store.IsFull(err) { // JetStream reserves the bound on each server
		err = fmt.Errorf("%w (audit.max_bytes is %d bytes: set a smaller one)", err, cfg.MaxBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("audit: stream %s: %w", s.Stream(Stream), err)
	}
	return &Trail{pub: pub, subj: s, cfg: cfg}, nil
}

// Subject is where the records of session's calls of tool go; a name that
// is not a valid token (an unknown tool the model made up) is "_".
func Subject(s bus.Subjects, session, tool string) string {
	if !bus.ValidID(session) {
		session = "_"
	}
	if !bus.ValidName(tool) {
		tool = "_"
	}
	return s.Prefix + "." + kind + "." + session + "." + tool
}

// Write publishes rec (input as the policy allows) under the call key as message id,
// without awaiting the acknowledgement (Stored does); an error: rec did not encode.
// A nil input with rec.InputDigest set is an input held elsewhere (an ended
// parked record's, by its digest): rec goes as the caller made it.
func (t *Trail) Write(rec *Record, input json.RawMessage) (*Pending, error) {
	if input == nil && rec.InputDigest != "" { // the caller's digest of an input held elsewhere
		return t.publish(rec, bus.CallKey(rec.Session, rec.ReplyID, rec.CallID))
	}
	if len(input) == 0 {
		input = json.RawMessage(`{}`) // what the tool gets for no input
	}
	rec.InputDigest = bus.InputDigest(input)
	if t.cfg.Inputs {
		if in := Redact(input, t.cfg.Redact); len(in) <= MaxInput {
			rec.Input = in
		} else {
			rec.InputOmitted = fmt.Sprintf("larger than %d bytes", MaxInput)
		}
	}
	return t.publish(rec, bus.CallKey(rec.Session, rec.ReplyID, rec.CallID))
}

// WriteRefusal is Write for a refusal, with a fresh message id: each counts.
func (t *Trail) WriteRefusal(rec *Record) (*Pending, error) {
	return t.publish(rec, "refused."+rec.Router+"."+nuid.Next())
}

// publish sends rec under message id id; an error: rec did not encode.
func (t *Trail) publish(rec *Record, id string) (*Pending, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(Subject(t.subj, rec.Session, rec.Tool))
	m.Data = b
	return t.pub.Publish(m, id), nil
}

// Pending is a record on its way to the stream: its ID is its call key.
type Pending = store.Pending

// Stored waits until every record of ps is stored, republishing as needed,
// up to ctx or Config.MaxWait (not through a full store), and returns those
// it could not store, each with its Err.
func (t *Trail) Stored(ctx context.Context, ps []*Pending) (lost []*Pending) {
	return t.pub.Stored(ctx, ps)
}

// Flush waits until every record written so far is acknowledged, or ctx
// ends (the asynchronous publishes only: Stored is what retries).
func (t *Trail) Flush(ctx context.Context) error { return t.pub.Flush(ctx) }

// Redact replaces the values of members named in names (any depth, any case)
// by "[redacted]"; input that is not JSON is replaced whole.
func Redact(input json.RawMessage, names []string) json.RawMessage {
	if len(names) == 0 {
		return input
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return json.RawMessage(`"[redacted: not JSON]"`)
	}
	out, err := json.Marshal(redact(v, names))
	if err != nil {
		return json.RawMessage(`"[redacted]"`)
	}
	return out
}

func redact(v any, names []string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(k, n) }) {
				x[k] = "[redacted]"
			} else {
				x[k] = redact(val, names)
			}
		}
	case []any:
		for i := range x {
			x[i] = redact(x[i], names)
		}
	case string:
		// An input given as a JSON string holding the object.
		if s := strings.TrimSpace(x); strings.HasPrefix(s, "{") || strings.HasPrefix(s, "[") {
			var inner any
			if json.Unmarshal([]byte(s), &inner) == nil {
				b, _ := json.Marshal(redact(inner, names))
				return string(b)
			}
		}
	}
	return v
}
