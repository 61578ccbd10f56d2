package parked

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// Record is a parked call (bus.ParkRecord: the inbox and the CLI read it
// too; only this package writes it).
type Record = bus.ParkRecord

// BatchKey is the P_parked key of a batch's continuation: <session>.<replyid>.
func BatchKey(session, replyID string) string { return session + "." + replyID }

// shared is what calls and conts both use.
type shared struct {
	kv  jetstream.KeyValue
	cfg Config
}

// calls holds the parked call records (keys <session>.<replyid>.<callid>):
// their transitions, live handoff requests and the watch-fed cache.
type calls struct {
	shared
	*callCache
	handoff handoff
	leases  leaseSet[callKey] // answered calls this router makes the result of
}

// watch loads the values of keys into apply and keeps it fed.
func watch(ctx context.Context, kv jetstream.KeyValue, keys string, apply func(jetstream.KeyValueEntry)) (*store.Watch, error) {
	w, err := store.WatchKV(ctx, kv, keys, apply)
	if err != nil {
		return nil, err
	}
	select {
	case <-w.Ready():
		return w, nil
	case <-ctx.Done():
		_ = w.Stop(context.WithoutCancel(ctx))
		return nil, ctx.Err()
	}
}

// create stores a new parked record. It comes before the request
// (docs/protocol.md 6.1): a handler that answers the moment the request
// arrives finds the call parked.
func (s *calls) create(ctx context.Context, r *Record) error {
	now := time.Now().UTC()
	r.Status, r.Created, r.Expires = bus.ParkParked, now, now.Add(s.cfg.TTL)
	// The subject stays P.answer.<tool> for every kind (docs/protocol.md
	// 6.1): a confirmation goes to P.approve.<tool>, which clients derive
	// from the tool; an open router still takes it on the old subject.
	r.Subject, r.InputDigest = s.handoff.subj.Handoffs.Answer(r.Call.Name), bus.InputDigest(r.Call.Input)
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	rev, err := store.Create(ctx, s.kv, r.Key(), b, store.Bounded)
	if err != nil {
		return fmt.Errorf("parked: park %s: %w", r.Key(), err)
	}
	r.Rev = rev
	s.note(r.Key(), r) // a copy: the caller keeps r
	return nil
}

// read decodes the value of key, at its revision.
func read[T any](ctx context.Context, kv jetstream.KeyValue, key string) (*T, uint64, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	v := new(T)
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return nil, 0, fmt.Errorf("parked: %s is corrupt: %w", key, err)
	}
	return v, e.Revision(), nil
}

// cas applies fn to the decoded value of key with compare-and-set
// (store.Update, retrying as p says); missing is the error for no value.
func cas[T any](ctx context.Context, kv jetstream.KeyValue, key string, p store.Policy, missing error, fn func(*T) error) (*T, uint64, error) {
	var v *T
	rev, err := store.Update(ctx, kv, key, p, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		if cur == nil {
			return nil, missing
		}
		v = new(T)
		if err := json.Unmarshal(cur.Value(), v); err != nil {
			return nil, fmt.Errorf("parked: %s is corrupt: %w", key, err)
		}
		if err := fn(v); err != nil {
			return nil, err
		}
		return json.Marshal(v)
	})
	return v, rev, err
}

// transition moves a record from status from to the state fn leaves it in,
// with compare-and-set, retrying as p says. It returns bus.ErrNotParked
// when the record is missing or in another status, bus.ErrAlreadyAnswered
// when from is parked and an answer already won.
func (s *calls) transition(ctx context.Context, key string, from bus.ParkStatus, p store.Policy, fn func(*Record) error) (*Record, error) {
	return s.change(ctx, key, p, func(r *Record) error {
		if r.Status != from {
			return wrongStatus(r, from)
		}
		return fn(r)
	})
}

func wrongStatus(r *Record, from bus.ParkStatus) error {
	if from == bus.ParkParked && (r.Status == bus.ParkAnswered || r.Status == bus.ParkDone && r.Answer != nil) {
		return bus.Errorf(bus.CodeAlreadyAnswered, "call %s was already answered", r.Call.ID)
	}
	return bus.Errorf(bus.CodeNotParked, "call %s is %s, not %s", r.Call.ID, r.Status, from)
}

// Answer takes an answer to the parked call key of tool in one
// compare-and-set: the first valid answer wins. decide validates it against
// the record, may rewrite it, and gives the verdict; its error changes
// nothing. An answer for another tool's call, or a call not parked, is
// bus.ErrNotParked; one after the winner is bus.ErrAlreadyAnswered.
func (st *Store) Answer(ctx context.Context, key, tool string, a *bus.Answer, decide Decide) (Answered, error) {
	s := st.calls
	var out Answered
	r, err := s.change(ctx, key, answerPolicy, func(r *Record) error {
		if r.Call.Name != tool {
			return bus.Errorf(bus.CodeNotParked, "no call %s of tool %s is parked in session %s, reply %s", r.Call.ID, tool, r.Session, r.ReplyID)
		}
		if r.Status != bus.ParkParked {
			return wrongStatus(r, bus.ParkParked)
		}
		v, res, err := decide(r, a)
		if err != nil {
			return err
		}
		out = Answered{Verdict: v, Answer: a}
		now := time.Now().UTC()
		switch v {
		case Done: // the answer is the result: parked → done in this one write
			r.Status, r.Answer, r.Result = bus.ParkDone, a, &res
		case Repark: // a confirmed call of an external tool now waits for its execution
			r.Kind, r.SuggestedRules, r.Reason, r.Expires = bus.KindExternal, nil, "", now.Add(s.cfg.TTL)
		default: // Confirmed: this router runs the confirmed call under a lease
			r.Status, r.Answer, r.Owner, r.Touched = bus.ParkAnswered, a, s.cfg.Owner, now
		}
		return nil
	})
	if store.IsFull(err) {
		// Nothing changed, and nothing will until someone frees space: the
		// answerer hears so at once and may answer again later.
		return out, fmt.Errorf("%s: the answer was not recorded: %w", store.FullText, err)
	}
	if err != nil {
		return out, err
	}
	out.Record = r
	if out.Verdict == Repark {
		s.handoff.live(r) // the record, now of kind external, is the new request
	}
	return out, nil
}

// answerPolicy retries an answer's write until it lands or the caller's
// context ends, but not through a full store (store.Policy.RideOutFull).
var answerPolicy = store.Policy{}

// close records the result made from an answered call's answer.
func (s *calls) close(ctx context.Context, key string, res bus.Result) (*Record, error) {
	return s.transition(ctx, key, bus.ParkAnswered, store.UntilLanded, func(r *Record) error {
		r.Status, r.Result = bus.ParkDone, &res
		return nil
	})
}

// end takes a call out of parked without an answer, to status (expired or
// cancelled) with res as its result; one racing router wins.
func (s *calls) end(ctx context.Context, key string, status bus.ParkStatus, res bus.Result) (*Record, error) {
	return s.transition(ctx, key, bus.ParkParked, store.UntilLanded, func(r *Record) error {
		r.Status, r.Result = status, &res
		return nil
	})
}

// change applies fn to the record key with compare-and-set and keeps the
// cache and the leases in step with the outcome.
func (s *calls) change(ctx context.Context, key string, p store.Policy, fn func(*Record) error) (*Record, error) {
	r, rev, err := cas(ctx, s.kv, key, p, bus.Errorf(bus.CodeNotParked, "no parked call %s", key), fn)
	if err != nil {
		if be := (*bus.Error)(nil); errors.As(err, &be) {
			return nil, err
		}
		return nil, fmt.Errorf("parked: update %s: %w", key, err)
	}
	r.Rev = rev
	s.note(key, r) // a copy: the caller gets r
	if r.Status == bus.ParkAnswered && r.Owner == s.cfg.Owner {
		s.leases.hold(callKey(key)) // this router makes the call's result: it renews the lease
	} else {
		s.leases.release(callKey(key))
	}
	return r, nil
}

// takeOverAnswers claims the answered calls whose router has not renewed
// its lease since cutoff (it died before making the call's result); the
// records returned are this router's to settle again (through the ledger,
// so a side effect is not repeated).
func (s *calls) takeOverAnswers(ctx context.Context, cutoff time.Time) []*Record {
	var out []*Record
	stale := slices.DeleteFunc(s.answeredBefore(cutoff), func(key string) bool { return s.leases.holds(callKey(key)) })
	for _, key := range stale {
		r, err := s.change(ctx, key, store.Bounded, func(r *Record) error {
			if r.Status != bus.ParkAnswered || !r.Touched.Before(cutoff) {
				return errNotOwner
			}
			s.cfg.Logger.Warn("parked: taking over an answer whose router stopped", "key", key, "owner", r.Owner)
			r.Owner, r.Touched = s.cfg.Owner, time.Now().UTC()
			return nil
		})
		if err == nil {
			out = append(out, r)
		}
	}
	return out
}

// The record is the handoff (docs/protocol.md 6.2, 1.6): a follower reads
// the parked records of its kind and tool from P_parked's stream through a
// router, which turns each into the request event (Request); live
// subscribers get it on P.external.<tool> / P.confirm.<tool> (core NATS).
// Nothing is written for the handoff: the record's next revision replaces
// the parked one in the stream.

// handoff publishes parked calls' requests for live subscribers.
type handoff struct {
	publish func(*nats.Msg) error // nil: no live requests
	subj    bus.Subjects
	source  string
	log     *slog.Logger
}

// live publishes r's request on P.external.<tool> or P.confirm.<tool>,
// unless the caller executes the tool itself (request-scoped). A lost
// publish loses nothing: followers read the record.
func (h handoff) live(r *Record) {
	if h.publish == nil || r.RequestScoped {
		return
	}
	m, err := requestMsg(r, h.source, h.subj)
	if err == nil {
		err = h.publish(m)
	}
	if err != nil {
		h.log.Debug("parked: live handoff request not published", "key", r.Key(), "err", err)
	}
}

// confirmRequest is bus.HandoffRequest with suggested_rules always present.
type confirmRequest struct {
	bus.HandoffRequest
	SuggestedRules []bus.Rule `json:"suggested_rules"`
}

// requestMsg is r's io.toolbus.external.request or io.toolbus.confirm.request
// (docs/protocol.md 6.2) on its live subject, from source.
func requestMsg(r *Record, source string, subj bus.Subjects) (*nats.Msg, error) {
	typ, subject := bus.TypeExternalReq, subj.Handoffs.External(r.Call.Name)
	req := bus.HandoffRequest{Call: r.Call, InputDigest: r.InputDigest, User: r.User, Context: r.Context, Subject: r.Subject, Expires: r.Expires}
	var data any = req
	if r.Kind == bus.KindConfirm {
		typ, subject = bus.TypeConfirmReq, subj.Handoffs.Confirm(r.Call.Name)
		req.Reason = r.Reason
		rules := r.SuggestedRules
		if rules == nil {
			rules = []bus.Rule{}
		}
		data = confirmRequest{HandoffRequest: req, SuggestedRules: rules}
	}
	e, err := bus.NewEvent(typ, source, data)
	if err != nil {
		return nil, err
	}
	e.SessionID, e.ReplyID, e.ToolCallID, e.Subject = r.Session, r.ReplyID, r.Call.ID, r.Call.ID
	e.ExpiryTime = r.Expires.Format(time.RFC3339Nano)
	return e.Msg(subject)
}

// A Want is what a follower of the handoff may see: the records parked
// for kind (bus.KindExternal or bus.KindConfirm) of tool ("" for every
// tool). It is the trust boundary of the follow relay (docs/security.md):
// a handler of one tool never gets another tool's or kind's requests.
type Want struct {
	Kind, Tool string
}

// Request turns the value of a P_parked entry into the request event a
// follower of w gets, from source; false when the entry is not for w: not a
// parked call record, request-scoped, or of another kind or tool.
func Request(value []byte, w Want, subj bus.Subjects, source string) (*nats.Msg, bool) {
	if len(value) == 0 || w.Kind != bus.KindExternal && w.Kind != bus.KindConfirm {
		return nil, false
	}
	var r Record
	if json.Unmarshal(value, &r) != nil || r.Status != bus.ParkParked || r.RequestScoped ||
		r.Kind != w.Kind || w.Tool != "" && r.Call.Name != w.Tool || !bus.ValidName(r.Call.Name) {
		return nil, false
	}
	m, err := requestMsg(&r, source, subj)
	return m, err == nil
}
