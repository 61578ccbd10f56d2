package parked

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

const (
	bound  = 10 * time.Second
	ttl    = time.Hour
	source = "toolbus/router/test"
)

var subj = bus.NewSubjects("")

// newStore starts a server and creates the buckets and streams.
func newStore(t *testing.T) *store.Store {
	t.Helper()
	nc := testkit.Connect(t, testkit.RunServer(t))
	js := testkit.JetStream(t, nc)
	st, err := store.Setup(t.Context(), js, subj, store.Config{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// start returns a started external Store, stopped when the test ends.
func start(t *testing.T, st *store.Store) *Store {
	t.Helper()
	return startAs(t, st, "router-a")
}

// startAs is start for the router named owner.
func startAs(t *testing.T, st *store.Store, owner string) *Store {
	t.Helper()
	s := New(st, subj, Config{TTL: ttl, Owner: owner, Source: source})
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, s.Stop)
	return s
}

// record is a parked external call of tool deploy.
func record(session, reply, call string) *Record {
	return &Record{Session: session, ReplyID: reply, Kind: bus.KindExternal,
		Call:    bus.Call{ID: call, Name: "deploy", Input: json.RawMessage(`{"env":"prod"}`)},
		User:    json.RawMessage(`"alice"`),
		Context: json.RawMessage(`{"tenant":"acme"}`)}
}

func park(t *testing.T, s *Store, r *Record) *Record {
	t.Helper()
	if err := s.calls.park(t.Context(), r); err != nil {
		t.Fatalf("park %s: %v", r.Key(), err)
	}
	return r
}

// requestOf is the request a follower of w gets for the record key, as
// the router relays it (docs/protocol.md 6.2): false when w sees none.
func requestOf(t *testing.T, s *Store, key string, w Want) (*nats.Msg, bool) {
	t.Helper()
	e, err := s.calls.kv.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return Request(e.Value(), w, subj, source)
}

// deployOf is what a follower of tool deploy's requests of kind sees.
func deployOf(kind string) Want { return Want{Kind: kind, Tool: "deploy"} }

// liveLog records the live requests a Store publishes.
type liveLog struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func (l *liveLog) publish(m *nats.Msg) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, m)
	return nil
}

func (l *liveLog) subjects() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.msgs {
		out = append(out, m.Subject)
	}
	return out
}

// startLive is startAs with the live requests recorded.
func startLive(t *testing.T, st *store.Store, owner string) (*Store, *liveLog) {
	t.Helper()
	l := &liveLog{}
	s := New(st, subj, Config{TTL: ttl, Owner: owner, Source: source, Publish: l.publish})
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, s.Stop)
	return s, l
}

func TestPark(t *testing.T) {
	for _, tc := range []struct {
		kind, typ, subject string
	}{
		{bus.KindExternal, bus.TypeExternalReq, "toolbus.external.deploy"},
		{bus.KindConfirm, bus.TypeConfirmReq, "toolbus.confirm.deploy"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			st := newStore(t)
			s, live := startLive(t, st, "router-a")
			r := record("s1", "r1", "c1")
			r.Kind = tc.kind
			if tc.kind == bus.KindConfirm {
				r.Reason = "deploy needs approval"
			}
			before := time.Now()
			park(t, s, r)
			subject := "toolbus.answer.deploy"
			if r.Status != bus.ParkParked || r.Subject != subject || r.InputDigest != bus.InputDigest(r.Call.Input) ||
				r.Created.Before(before.Add(-time.Second)) || !r.Expires.Equal(r.Created.Add(ttl)) {
				t.Fatalf("parked record %+v", r)
			}
			// The record is in KV under <session>.<reply>.<call>.
			got, err := s.Read.Get(t.Context(), "s1.r1.c1")
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != bus.ParkParked || got.Call.ID != "c1" || string(got.User) != `"alice"` {
				t.Fatalf("stored record %+v", got)
			}
			if ps := s.Read.Parked("s1", "r1"); len(ps) != 1 || ps[0].Key() != "s1.r1.c1" {
				t.Fatalf("Parked %v", keys(ps))
			}
			// The record is the request: a follower of the tool's kind gets
			// it, as live subscribers did.
			if got := live.subjects(); len(got) != 1 || got[0] != tc.subject {
				t.Fatalf("live requests on %v, want %s", got, tc.subject)
			}
			m, ok := requestOf(t, s, r.Key(), deployOf(tc.kind))
			if !ok {
				t.Fatal("no request for the parked record")
			}
			if m.Subject != tc.subject || m.Header.Get(bus.HeaderContentType) != bus.ContentTypeEvent {
				t.Fatalf("handoff on %s with headers %v", m.Subject, m.Header)
			}
			ev, err := bus.Decode(&nats.Msg{Data: m.Data})
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type != tc.typ || ev.SessionID != "s1" || ev.ReplyID != "r1" || ev.ToolCallID != "c1" || ev.Subject != "c1" || ev.Source != source {
				t.Fatalf("handoff event %+v", ev)
			}
			if exp, err := ev.Expiry(); err != nil || !exp.Equal(r.Expires) {
				t.Fatalf("handoff expirytime %q, want %v", ev.ExpiryTime, r.Expires)
			}
			var req bus.HandoffRequest
			if err := ev.DataAs(&req); err != nil {
				t.Fatal(err)
			}
			if req.Call.ID != "c1" || req.Call.Name != "deploy" || string(req.Call.Input) != `{"env":"prod"}` || string(req.User) != `"alice"` ||
				string(req.Context) != `{"tenant":"acme"}` || req.Subject != subject || req.InputDigest != r.InputDigest || !req.Expires.Equal(r.Expires) {
				t.Fatalf("handoff data %s", ev.Data)
			}
			var fields map[string]json.RawMessage
			_ = json.Unmarshal(ev.Data, &fields)
			if tc.kind == bus.KindConfirm {
				if req.Reason != "deploy needs approval" {
					t.Fatalf("confirm data %s", ev.Data)
				}
			} else if _, ok := fields["suggested_rules"]; ok {
				t.Fatalf("external data has suggested_rules: %s", ev.Data)
			}
		})
	}
}

// confirmData parks a confirmation with rules and returns its handoff data.
func confirmData(t *testing.T, rules []bus.Rule) map[string]json.RawMessage {
	t.Helper()
	st := newStore(t)
	s := start(t, st)
	r := record("s1", "r1", "c1")
	r.Kind, r.Reason, r.SuggestedRules = bus.KindConfirm, "ask mode", rules
	park(t, s, r)
	m, ok := requestOf(t, s, r.Key(), deployOf(bus.KindConfirm))
	if !ok {
		t.Fatal("no request")
	}
	ev, err := bus.Decode(&nats.Msg{Data: m.Data})
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(ev.Data, &fields); err != nil {
		t.Fatal(err)
	}
	return fields
}

func TestConfirmRequestSuggestedRules(t *testing.T) {
	rules := []bus.Rule{{Tool: "deploy", Pattern: "prod", Behavior: "allow"}}
	if got := string(confirmData(t, rules)["suggested_rules"]); got != `[{"tool":"deploy","pattern":"prod","behavior":"allow"}]` {
		t.Fatalf("suggested_rules %s", got)
	}
	// docs/protocol.md 6: the confirm request's data adds suggested_rules, so a
	// confirmation without suggestions carries an empty array.
	fields := confirmData(t, nil)
	if got, ok := fields["suggested_rules"]; !ok || string(got) != "[]" {
		t.Fatalf("io.toolbus.confirm.request without suggestions has no suggested_rules (got %q, want []): "+
			"external.go publishHandoff sets req.SuggestedRules = []bus.Rule{} but Request.SuggestedRules is tagged omitempty, so the empty array is dropped", got)
	}
}

func TestParkRequestScoped(t *testing.T) {
	st := newStore(t)
	s, live := startLive(t, st, "router-a")
	r := record("s1", "r1", "c1")
	r.RequestScoped = true
	park(t, s, r)
	if r.Status != bus.ParkParked {
		t.Fatalf("record %+v", r)
	}
	if _, ok := requestOf(t, s, r.Key(), deployOf(bus.KindExternal)); ok || len(live.subjects()) != 0 {
		t.Fatalf("a handoff request for a call the caller runs itself (live %v)", live.subjects())
	}
	if _, err := s.Read.Get(t.Context(), r.Key()); err != nil {
		t.Fatal(err)
	}
}

func TestParkTwice(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	first := park(t, s, record("s1", "r1", "c1"))
	err := s.calls.park(t.Context(), record("s1", "r1", "c1"))
	if err == nil {
		t.Fatal("a second park of the same call succeeded")
	}
	if got, _ := s.Read.Get(t.Context(), first.Key()); got.Rev != first.Rev || got.Status != bus.ParkParked {
		t.Fatalf("record after a failed second park: %+v", got)
	}
	if _, ok := requestOf(t, s, first.Key(), deployOf(bus.KindExternal)); !ok {
		t.Fatalf("a failed second Park of %s took the first park's request away", first.Key())
	}
}

func answered(r *Record) error {
	r.Status = bus.ParkAnswered
	r.Answer = &bus.Answer{State: bus.StateSuccess, Output: bus.Text("deployed")}
	return nil
}

func TestTransition(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	r := park(t, s, record("s1", "r1", "c1"))
	key := r.Key()

	got, err := s.calls.transition(t.Context(), key, bus.ParkParked, store.Bounded, answered)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != bus.ParkAnswered || got.Answer == nil {
		t.Fatalf("after the answer %+v", got)
	}
	testkit.CheckFor(t, bound, 2*time.Millisecond, func() error {
		if ps := s.Read.Parked("", ""); len(ps) != 0 {
			return fmt.Errorf("an answered call is still listed as parked: %v", keys(ps))
		}
		return nil
	})
	// The handoff request is gone once the call left parked.
	if _, ok := requestOf(t, s, key, deployOf(bus.KindExternal)); ok {
		t.Fatal("handoff request kept after the answer")
	}
	for _, tc := range []struct {
		name string
		key  string
		from bus.ParkStatus
		want *bus.Error
	}{
		{"second answer", key, bus.ParkParked, bus.ErrAlreadyAnswered},
		{"unknown key", "s1.r1.nope", bus.ParkParked, bus.ErrNotParked},
		{"unknown session", "s9.r1.c1", bus.ParkParked, bus.ErrNotParked},
		{"wrong status", key, bus.ParkDone, bus.ErrNotParked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			_, err := s.calls.transition(t.Context(), tc.key, tc.from, store.Bounded, func(*Record) error { ran = true; return nil })
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if ran {
				t.Fatal("fn ran on a refused transition")
			}
		})
	}
	// answered → done; an answer after that is still already_answered.
	if _, err := s.calls.transition(t.Context(), key, bus.ParkAnswered, store.Bounded, func(r *Record) error {
		r.Status = bus.ParkDone
		res := bus.Result{ID: "c1", Name: "deploy", State: bus.StateSuccess, Output: bus.Text("deployed")}
		r.Result = &res
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.calls.transition(t.Context(), key, bus.ParkParked, store.Bounded, answered); !errors.Is(err, bus.ErrAlreadyAnswered) {
		t.Fatalf("answer after done: %v, want already_answered", err)
	}
}

func TestTransitionOutOfParkedWithoutAnswer(t *testing.T) {
	for _, status := range []bus.ParkStatus{bus.ParkExpired, bus.ParkCancelled} {
		t.Run(string(status), func(t *testing.T) {
			st := newStore(t)
			s := start(t, st)
			r := park(t, s, record("s1", "r1", "c1"))
			if _, err := s.calls.transition(t.Context(), r.Key(), bus.ParkParked, store.Bounded, func(r *Record) error {
				r.Status = status
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if _, ok := requestOf(t, s, r.Key(), deployOf(bus.KindExternal)); ok {
				t.Fatal("handoff request kept")
			}
			// A late answer finds nothing parked.
			if _, err := s.calls.transition(t.Context(), r.Key(), bus.ParkParked, store.Bounded, answered); !errors.Is(err, bus.ErrNotParked) {
				t.Fatalf("late answer: %v, want not_parked", err)
			}
		})
	}
}

func TestTransitionFnError(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	r := park(t, s, record("s1", "r1", "c1"))
	stop := errors.New("bad answer")
	if _, err := s.calls.transition(t.Context(), r.Key(), bus.ParkParked, store.Bounded, func(r *Record) error {
		r.Status = bus.ParkAnswered
		return stop
	}); !errors.Is(err, stop) {
		t.Fatalf("err %v", err)
	}
	// Nothing changed: still parked, still handed off, still answerable.
	if got, _ := s.Read.Get(t.Context(), r.Key()); got.Status != bus.ParkParked {
		t.Fatalf("status %s", got.Status)
	}
	if _, ok := requestOf(t, s, r.Key(), deployOf(bus.KindExternal)); !ok {
		t.Fatal("no handoff request")
	}
	if _, err := s.calls.transition(t.Context(), r.Key(), bus.ParkParked, store.Bounded, answered); err != nil {
		t.Fatal(err)
	}
}

func TestRacingAnswersOneWins(t *testing.T) {
	st := newStore(t)
	stores := []*Store{start(t, st), start(t, st)}
	r := park(t, stores[0], record("s1", "r1", "c1"))
	const n = 10
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := stores[i%2].calls.transition(t.Context(), r.Key(), bus.ParkParked, store.Bounded, answered)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	won := 0
	for err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, bus.ErrAlreadyAnswered):
			t.Errorf("losing answer: %v, want already_answered", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d answers won, want 1", won)
	}
}

// A confirmation of an external tool's call parks it again, as external,
// in the answer's one compare-and-set: followers of confirmations no
// longer see it, followers of the external tool do.
func TestRepark(t *testing.T) {
	st := newStore(t)
	s, live := startLive(t, st, "router-a")
	r := record("s1", "r1", "c1")
	r.Kind = bus.KindConfirm
	park(t, s, r)
	yes := true
	out, err := s.Answer(t.Context(), r.Key(), "deploy", &bus.Answer{Confirmed: &yes}, func(*Record, *bus.Answer) (Verdict, bus.Result, error) {
		return Repark, bus.Result{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := out.Record
	if out.Verdict != Repark || got.Status != bus.ParkParked || got.Kind != bus.KindExternal || got.Answer != nil {
		t.Fatalf("reparked %+v", got)
	}
	if m, ok := requestOf(t, s, r.Key(), deployOf(bus.KindExternal)); !ok || m.Subject != "toolbus.external.deploy" {
		t.Fatalf("new handoff: %v %v", m, ok)
	}
	if _, ok := requestOf(t, s, r.Key(), deployOf(bus.KindConfirm)); ok {
		t.Fatal("the confirm request is still handed off")
	}
	if got := live.subjects(); len(got) != 2 || got[1] != "toolbus.external.deploy" {
		t.Fatalf("live requests %v", got)
	}
	if ps := s.Read.Parked("s1", ""); len(ps) != 1 || ps[0].Kind != bus.KindExternal {
		t.Fatalf("Parked after repark: %+v", ps)
	}
}

// TestParkedAfterTransition looks for a stale cache: once Transition has
// returned, the store that made it must not list the call as parked again.
// The race it looks for is narrow, so it tries many times; it passes when the
// race did not happen.
func TestParkedAfterTransition(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	for i := range 300 {
		r := park(t, s, record("s1", "r1", fmt.Sprint("c", i)))
		if _, err := s.calls.transition(t.Context(), r.Key(), bus.ParkParked, store.Bounded, answered); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			if ps := s.Read.Parked("s1", ""); len(ps) != 0 {
				t.Fatalf("%s is listed as parked after Transition answered it (attempt %d): Transition removes it from the cache, "+
					"then the watch delivers the older parked revision of the Park and external.go apply re-adds it, since the key is "+
					"no longer in the cache to compare revisions with; it stays listed until the watch delivers the answered revision", keys(ps), i)
			}
		}
	}
}

func TestExpired(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	r := park(t, s, record("s1", "r1", "c1"))
	if got := s.calls.expired(time.Now()); len(got) != 0 {
		t.Fatalf("expired right after parking: %v", keys(got))
	}
	if got := s.calls.expired(r.Expires.Add(time.Nanosecond)); !slices.Equal(keys(got), []string{"s1.r1.c1"}) {
		t.Fatalf("Expired after the TTL: %v", keys(got))
	}
	if got := s.calls.expired(r.Expires); len(got) != 0 {
		t.Fatalf("Expired at the deadline itself: %v", keys(got))
	}
	// A record written elsewhere with a past Expires reaches the cache and is expired.
	old := record("s2", "r1", "c1")
	old.Status, old.Created, old.Expires, old.Subject = bus.ParkParked, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), "toolbus.answer.deploy"
	b, _ := json.Marshal(old)
	if _, err := st.Parked.Create(t.Context(), old.Key(), b); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		if got := keys(s.calls.expired(time.Now())); !slices.Equal(got, []string{"s2.r1.c1"}) {
			return fmt.Errorf("Expired(now) = %v", got)
		}
		return nil
	})
	// Answered records are never expired.
	if _, err := s.calls.transition(t.Context(), old.Key(), bus.ParkParked, store.Bounded, answered); err != nil {
		t.Fatal(err)
	}
	if got := s.calls.expired(time.Now().Add(2 * ttl)); !slices.Equal(keys(got), []string{"s1.r1.c1"}) {
		t.Fatalf("Expired after answering s2: %v", keys(got))
	}
}

func TestParkedFilter(t *testing.T) {
	st := newStore(t)
	s := start(t, st)
	order := []string{"s1.r1.c2", "s1.r1.c1", "s2.r1.c1", "s1.r2.c1"}
	for _, k := range order {
		parts := strings.Split(k, ".")
		park(t, s, record(parts[0], parts[1], parts[2]))
	}
	for _, tc := range []struct {
		session, reply string
		want           []string
	}{
		{"", "", order},
		{"s1", "", []string{"s1.r1.c2", "s1.r1.c1", "s1.r2.c1"}},
		{"s1", "r1", []string{"s1.r1.c2", "s1.r1.c1"}},
		{"s1", "r2", []string{"s1.r2.c1"}},
		{"", "r1", []string{"s1.r1.c2", "s1.r1.c1", "s2.r1.c1"}},
		{"s2", "r2", nil},
		{"s9", "", nil},
	} {
		t.Run(tc.session+"/"+tc.reply, func(t *testing.T) {
			if got := keys(s.Read.Parked(tc.session, tc.reply)); !slices.Equal(got, tc.want) {
				t.Fatalf("Parked(%q, %q) = %v, want %v (oldest first)", tc.session, tc.reply, got, tc.want)
			}
		})
	}
	// Another store loads them at Start and follows later parks and answers.
	other := start(t, st)
	if got := keys(other.Read.Parked("", "")); !slices.Equal(got, order) {
		t.Fatalf("other store Parked %v", got)
	}
	park(t, s, record("s3", "r1", "c1"))
	if _, err := s.calls.transition(t.Context(), "s1.r1.c1", bus.ParkParked, store.Bounded, answered); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		want := []string{"s1.r1.c2", "s2.r1.c1", "s1.r2.c1", "s3.r1.c1"}
		if got := keys(other.Read.Parked("", "")); !slices.Equal(got, want) {
			return fmt.Errorf("other store Parked %v, want %v", got, want)
		}
		return nil
	})
}

func TestBadRecordIgnored(t *testing.T) {
	st := newStore(t)
	if _, err := st.Parked.Put(t.Context(), "s1.r1.c1", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	s := start(t, st)
	if len(s.Read.Parked("", "")) != 0 {
		t.Fatal("a corrupt record is listed")
	}
	if _, err := s.Read.Get(t.Context(), "s1.r1.c1"); err == nil || store.IsNotFound(err) {
		t.Fatalf("Get of a corrupt record: %v", err)
	}
	if s.cfg.TTL != ttl {
		t.Fatalf("TTL %v", s.cfg.TTL)
	}
	if d := New(st, subj, Config{}); d.cfg.TTL != 24*time.Hour {
		t.Fatalf("default TTL %v", d.cfg.TTL)
	}
}

func TestStartEndsWithContext(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s := New(st, subj, Config{})
	if err := s.Start(ctx); err == nil {
		t.Error("Start with an ended context succeeded")
	}
	s.Stop(t.Context())
	s.Stop(t.Context())
	// Stop before Start is fine too.
	New(st, subj, Config{}).Stop(t.Context())
}

// park stores a new parked record (create) and publishes its live request.
func (s *calls) park(ctx context.Context, r *Record) error {
	if err := s.create(ctx, r); err != nil {
		return err
	}
	s.live(r)
	return nil
}

// Another router lists a call parked the moment its record is written
// (docs/protocol.md 3.4: parked.list has a reply's parked calls by the time
// the reply is sent, whichever router answers it): ParkedNow brings its
// watch-fed cache up to the bucket's last write first.
func TestParkedNowSeesOtherRoutersWrites(t *testing.T) {
	st := newStore(t)
	a, b := start(t, st), startAs(t, st, "router-b")
	for i := range 50 {
		r := park(t, a, record("s1", fmt.Sprintf("r%d", i), "c1"))
		got, err := b.Read.ParkedNow(t.Context(), "s1")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(got, func(x *Record) bool { return x.Key() == r.Key() }) {
			t.Fatalf("write %d: router-b lists %d calls without %s", i, len(got), r.Key())
		}
	}
	if got, err := b.Read.ParkedNow(t.Context(), "s2"); err != nil || len(got) != 0 {
		t.Fatalf("a session with nothing parked: %d, %v", len(got), err)
	}
}
