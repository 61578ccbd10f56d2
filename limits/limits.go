// Package limits enforces quotas and rate limits for every router at once,
// with all state in JetStream: rates as a GCRA value per key in P_limits
// (compare-and-set), budgets as JetStream counters (Nats-Incr). Check admits
// a call having counted it against every matching rule, or refuses it having
// counted nothing. See docs/guardrails.md.
package limits

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// Names of the JetStream resources, after the deployment prefix.
const (
	BucketRates   = "limits"       // P_limits: one GCRA value per rate key
	StreamBudgets = "LIMITS"       // P_LIMITS: counters on P.limits.<rule>.<key>.<day>
	budgetsKind   = "limits"       // subject kind of the counters
	budgetMaxAge  = 48 * time.Hour // a day's counter outlives its day
)

// Refusal kinds.
const (
	KindRate   = "rate"
	KindBudget = "budget"
	KindFull   = "full" // a new count past the soft bound of the quotas' state (Config.MaxBytes)
)

// Call is what a limit looks at of a call. User and Session are as the
// router trusts them (a bound session's user comes from its credentials).
type Call struct {
	Tool     string
	ReadOnly bool
	User     string
	// Login is the session's own agent login (docs/security.md "Identities"):
	// a call with no user counts per user under it, apart from the shared
	// agent's sessions (no login of their own: "").
	Login   string
	Session string
	// CacheHit: the result cache answers the call (counted by CacheHits rules).
	CacheHit bool
}

// Refusal is a call over one of its limits: nothing ran, nothing counted.
type Refusal struct {
	Rule       string
	Kind       string // KindRate or KindBudget
	RetryAfter time.Duration
}

// RetryAfterMS is RetryAfter in whole milliseconds, rounded up, at least 1.
func (r *Refusal) RetryAfterMS() int64 {
	return max(1, (r.RetryAfter + time.Millisecond - 1).Milliseconds())
}

// Message is the text a model reads: what was refused, and when to try.
func (r *Refusal) Message(tool string) string {
	if r.Kind == KindBudget {
		return fmt.Sprintf("LimitExceededError: The daily budget of rule '%s' for the tool '%s' is used up. Do not call it again for %d ms (until the next UTC day); use another tool or tell the user.",
			r.Rule, tool, r.RetryAfterMS())
	}
	if r.Kind == KindFull {
		return fmt.Sprintf("LimitExceededError: The tool '%s' cannot be counted by rule '%s' now: the quota store holds as many counts as it may. Try again in %d ms or tell the user.",
			tool, r.Rule, r.RetryAfterMS())
	}
	return fmt.Sprintf("LimitExceededError: The tool '%s' was called too often (rule '%s'). Wait at least %d ms before calling it again, and make fewer calls.",
		tool, r.Rule, r.RetryAfterMS())
}

// Config configures a Limiter.
type Config struct {
	// Policy is the rule set; it is checked in New.
	Policy Policy
	// Replicas of the bucket and stream; zero means 1.
	Replicas int
	// Memory keeps both in memory instead of files.
	Memory bool
	// Now is the clock; nil means time.Now. Tests pass a fake one.
	Now func() time.Time
}

// DefaultMaxBytes is Policy.MaxBytes's default (session 37): about a
// million rate values (1.3 million before session 39's run fields) or 1.9
// million budget counters.
const DefaultMaxBytes = 256 << 20

// Bytes a new count is judged to take: a rate value (263 measured since
// session 39, 205 before), a budget counter.
const (
	rateBytes   = 288
	budgetBytes = 192
)

// Limiter checks calls against the rules. It is safe for concurrent use,
// and any number of Limiters on one deployment share every count.
type Limiter struct {
	rules   []Rule
	tenants map[string]string
	now     func() time.Time
	js      jetstream.JetStream
	rates   jetstream.KeyValue
	budgets jetstream.Stream
	subj    bus.Subjects
	// rateRoom and budgetRoom are the soft bounds of rates and budgets (nil: none).
	rateRoom, budgetRoom *store.Bound
}

// New checks cfg and creates (or opens) the rates bucket and the budgets
// stream. It is idempotent and safe to run from every router at once.
func New(ctx context.Context, js jetstream.JetStream, s bus.Subjects, cfg Config) (*Limiter, error) {
	if err := cfg.Policy.Check(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Replicas = max(cfg.Replicas, 1)
	storage := store.StorageOf(cfg.Memory)
	l := &Limiter{rules: cfg.Policy.Rules, tenants: cfg.Policy.Tenants, now: cfg.Now, js: js, subj: s}
	soft := cmp.Or(cfg.Policy.MaxBytes, DefaultMaxBytes)
	err := store.Retry(ctx, store.Provision, func(ctx context.Context) (err error) {
		l.rates, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: s.Bucket(BucketRates), Description: "toolbus rate limits (GCRA arrival times)",
			TTL: MaxRateSpan, Replicas: cfg.Replicas, Storage: storage,
			MaxBytes: store.HardBytesFor(ctx, js, "KV_"+s.Bucket(BucketRates), soft),
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("limits: bucket %s: %w", s.Bucket(BucketRates), err)
	}
	err = store.Retry(ctx, store.Provision, func(ctx context.Context) (err error) {
		l.budgets, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: s.Stream(StreamBudgets), Description: "toolbus budgets (counters per rule, key and UTC day)",
			Subjects: []string{s.All(budgetsKind)}, AllowMsgCounter: true, MaxAge: budgetMaxAge,
			MaxMsgsPerSubject: 1, AllowDirect: true, Replicas: cfg.Replicas, Storage: storage,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("limits: stream %s: %w", s.Stream(StreamBudgets), err)
	}
	l.rateRoom = store.NewBound(ctx, l.rates, soft)
	l.budgetRoom = store.NewBoundOf(ctx, func(ctx context.Context) (int64, error) {
		info, err := l.budgets.Info(ctx)
		if err != nil {
			return 0, err
		}
		return int64(info.State.Bytes), nil
	}, soft)
	return l, nil
}

// Bounds are the soft bounds of the rates bucket and the budgets stream,
// for status and metrics (nil: none).
func (l *Limiter) Bounds() (rates, budgets *store.Bound) { return l.rateRoom, l.budgetRoom }

// key digests the call's values of the rule's dimensions into a KV key.
func (l *Limiter) key(r *Rule, c Call) string {
	h := sha256.New()
	for _, p := range r.Per {
		v := l.value(p, c)
		fmt.Fprintf(h, "%s=%d:%s;", p, len(v), v)
	}
	return r.Name + "." + hex.EncodeToString(h.Sum(nil)[:16])
}

// day is the UTC day of t as a subject token, and when the next one starts.
func day(t time.Time) (string, time.Time) {
	t = t.UTC()
	start := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return start.Format("20060102"), start.AddDate(0, 0, 1)
}

func (l *Limiter) budgetSubject(key string, now time.Time) string {
	d, _ := day(now)
	return l.subj.Prefix + "." + budgetsKind + "." + key + "." + d
}

// undo takes back what an admitted rule counted.
type undo func(context.Context)

// look is what Check read of one matching rule's counts before counting.
type look struct {
	r    *Rule
	key  string
	rate jetstream.KeyValueEntry // the rate's value (nil: none)
	// now is the rate's clock, read after its value: another call's value,
	// counted on this clock, is never ahead of it by that call's earlier read.
	now time.Time
	// rateRoom and budgetRoom: the soft bound counted a new rate value's,
	// or a new counter's, bytes.
	rateRoom, budgetRoom bool
}

// Check counts c against every matching rule. It reads every count first,
// so a call a rule refuses then is refused having written nothing; one
// that another call took the last slot from since takes back what it
// counted. It takes every rate's slot before any budget's units: a rate's
// compare-and-set is refused without writing, a budget's increment only
// after it, so with one budget rule a call never takes units back (a
// call that read or incremented the counter meanwhile would have been
// refused by units that were never spent). nil, nil: the call may run; an
// error: it must not (fail closed).
func (l *Limiter) Check(ctx context.Context, c Call) (*Refusal, error) {
	now := l.now()
	var looks []*look
	for i := range l.rules {
		if !l.rules[i].matches(c) {
			continue
		}
		lk := &look{r: &l.rules[i], key: l.key(&l.rules[i], c)}
		looks = append(looks, lk)
		if ref, err := l.look(ctx, lk, now); err != nil || ref != nil {
			for _, lk := range looks { // nothing new is kept: its bytes are not either
				if lk.rateRoom {
					l.rateRoom.Grew(-rateBytes)
				}
				if lk.budgetRoom {
					l.budgetRoom.Grew(-budgetBytes)
				}
			}
			return ref, err
		}
	}
	var undos []undo
	for _, count := range []func(context.Context, *look, time.Time) (*Refusal, undo, error){l.rate, l.budget} {
		for _, lk := range looks {
			ref, u, err := count(ctx, lk, now)
			if err != nil || ref != nil {
				for _, u := range undos {
					u(context.WithoutCancel(ctx))
				}
				return ref, err
			}
			if u != nil {
				undos = append(undos, u)
			}
		}
	}
	return nil, nil
}

// look reads lk's rate value and budget counter, and refuses the call when
// either is over, or when it needs a new one past the soft bound.
func (l *Limiter) look(ctx context.Context, lk *look, now time.Time) (*Refusal, error) {
	r := lk.r
	if r.Rate != nil {
		e, err := l.rates.Get(ctx, lk.key)
		switch {
		case store.IsNotFound(err):
			if lk.rateRoom = l.rateRoom.Room(ctx, rateBytes); !lk.rateRoom {
				return full(r), nil
			}
		case err != nil:
			return nil, fmt.Errorf("limits: rule %s: %w", r.Name, err)
		default:
			lk.rate = e
		}
		lk.now = l.now()
		if ref := rateRefusal(r, lk.rate, lk.now); ref != nil {
			return ref, nil
		}
	}
	if r.Budget == nil {
		return nil, nil
	}
	total, held, err := l.counter(ctx, l.budgetSubject(lk.key, now))
	if err != nil {
		return nil, fmt.Errorf("limits: rule %s: %w", r.Name, err)
	}
	if total+r.Budget.Cost > r.Budget.Units {
		return overBudget(r, now), nil
	}
	// Past the bound a counter held goes on, and so does a key counted the
	// day before (its day's counter is new at midnight); no other starts.
	if lk.budgetRoom = !held && l.budgetRoom.Room(ctx, budgetBytes); held || lk.budgetRoom {
		return nil, nil
	}
	if _, held, err = l.counter(ctx, l.budgetSubject(lk.key, now.Add(-24*time.Hour))); err != nil {
		return nil, fmt.Errorf("limits: rule %s: %w", r.Name, err)
	}
	if !held {
		return full(r), nil
	}
	return nil, nil
}

// gcra is a rates value: the theoretical arrival time (unix ns) and a nonce
// recognising this writer's own write after a lost acknowledgement. Since
// session 39 it also keeps what a call giving its slot back needs to give
// back no more than its slot still holds: the run of slots it is on (named
// by the call that began it, whose clock the value had fallen behind), the
// latest clock a slot on the run was taken at, the slots taken on it, and
// what was given back on it (how often, how much, the last few: each the
// slot's place on the run and the time it gave back).
type gcra struct {
	TAT   int64      `json:"tat"`
	Nonce string     `json:"n"`
	Run   string     `json:"r,omitempty"`
	At    int64      `json:"at,omitempty"`
	Taken int64      `json:"k,omitempty"`
	Given int64      `json:"g,omitempty"`
	Back  int64      `json:"b,omitempty"`
	Last  [][2]int64 `json:"l,omitempty"`
}

// lastGiven bounds gcra.Last: a call giving back after more give-backs than
// that counts the ones it cannot see as below its slot (less given back).
const lastGiven = 8

// rateValue is rates value cur (nil, or corrupt: none).
func rateValue(cur jetstream.KeyValueEntry) gcra {
	var g gcra
	if cur == nil || json.Unmarshal(cur.Value(), &g) != nil {
		return gcra{}
	}
	return g
}

// tat is the theoretical arrival time of rates value cur, not before now.
func tat(cur jetstream.KeyValueEntry, now time.Time) time.Time {
	return time.Unix(0, max(rateValue(cur).TAT, now.UnixNano()))
}

// slot is one call's slot: its run, the nonce of the write that took it,
// its start, its place on the run, and the run's give-backs before it;
// gave is the count of give-backs its own give-back wrote (0: none yet).
type slot struct {
	run, nonce                     string
	from, place, given, back, gave int64
}

// take is g with a slot more, taken on the clock now, and that slot. A
// value behind now, or of no run (none, or written before session 39),
// begins a run.
func take(g gcra, now time.Time, em time.Duration, nonce string) (gcra, slot) {
	n := now.UnixNano()
	if g.Run == "" || g.TAT <= n {
		g = gcra{TAT: max(g.TAT, n), Run: nonce, At: n}
	}
	s := slot{run: g.Run, nonce: nonce, from: g.TAT, place: g.Taken, given: g.Given, back: g.Back}
	g.TAT += int64(em)
	g.Taken++
	g.Nonce, g.At = nonce, max(g.At, n)
	return g, s
}

// giveBack is g without slot s as far as g shows s is in it (ok: it gave
// something back). When g is still the write that took s, all of it: the
// value before. Else, on s's run, the part of s after the latest clock a
// slot was taken at: a slot's time a later call's clock passed was spent
// (each later call's own slot began after it). s counts as lower by what
// slots below it gave back since, which are all given back since but
// those the last give-backs show above it. A run begun since holds
// nothing of s, nor does a value whose last give-backs show s's own (a
// retry after a lost acknowledgement, another write since), or that may
// have dropped it (s.gave). So it never gives back more than s holds. The
// value written has the nonce given, and records the give-back.
func giveBack(g gcra, s slot, em time.Duration, nonce string) (_ gcra, ok bool) {
	if g.Run != s.run || s.gave != 0 && g.Given-s.gave >= lastGiven {
		return g, false
	}
	d := int64(em) // the top slot: nothing above moves
	if g.Nonce != s.nonce {
		lower := g.Back - s.back // differences: right past a wrap too
		for i, l := range g.Last {
			switch {
			case l[0] == s.place:
				return g, false
			case g.Given-int64(len(g.Last)-i)-s.given >= 0 && l[0] > s.place:
				lower -= l[1]
			}
		}
		// The slots below s that had not given back when s was taken
		// give back at most a slot each since: more give-backs than Last
		// shows are not all below s (differences, as above).
		if n := s.place - s.given; n >= 0 && lower/int64(em) > n {
			lower = n * int64(em)
		}
		if d = min(d, s.from-lower+int64(em)-g.At); d <= 0 {
			return g, false
		}
	}
	g.TAT -= d
	g.Nonce = nonce
	g.Given++
	g.Back += d
	g.Last = append(g.Last[max(0, len(g.Last)+1-lastGiven):], [2]int64{s.place, d})
	return g, true
}

// rateRefusal refuses a call of r's rate, whose value is cur, until a slot
// frees (nil: one is free).
func rateRefusal(r *Rule, cur jetstream.KeyValueEntry, now time.Time) *Refusal {
	if wait := tat(cur, now).Sub(now) - r.Rate.emission()*time.Duration(r.Rate.Burst-1); wait > 0 {
		return &Refusal{Rule: r.Name, Kind: KindRate, RetryAfter: wait}
	}
	return nil
}

var errRefused = errors.New("limits: refused")

// rate takes a slot of lk's rate (if any): it writes over the value look
// read, or reads again when another call wrote since, and then may refuse.
func (l *Limiter) rate(ctx context.Context, lk *look, _ time.Time) (*Refusal, undo, error) {
	r := lk.r
	if r.Rate == nil {
		return nil, nil, nil
	}
	em, nonce := r.Rate.emission(), nuid.Next()
	var mine slot // the slot of the value written last
	next := func(cur jetstream.KeyValueEntry) ([]byte, error) {
		g, s := take(rateValue(cur), lk.now, em, nonce)
		mine = s
		return json.Marshal(g)
	}
	first, _ := next(lk.rate)
	var err error
	if lk.rate == nil {
		_, err = l.rates.Create(ctx, lk.key, first)
	} else {
		_, err = l.rates.Update(ctx, lk.key, first, lk.rate.Revision())
	}
	var ref *Refusal
	if err != nil {
		_, err = store.Update(ctx, l.rates, lk.key, store.Bounded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
			if cur != nil && bytes.Equal(cur.Value(), first) {
				return nil, store.ErrNoChange // the first write landed
			}
			lk.now = l.now() // read again, after cur
			if ref = rateRefusal(r, cur, lk.now); ref == nil && cur == nil && lk.rate != nil && !l.rateRoom.Room(ctx, rateBytes) {
				ref = full(r)
			}
			if ref != nil {
				return nil, errRefused
			}
			return next(cur)
		})
	}
	if errors.Is(err, errRefused) {
		return ref, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("limits: rule %s: %w", r.Name, err)
	}
	// The undo gives the slot back (the call did not run), as far as the
	// value still holds it.
	return nil, func(ctx context.Context) {
		_, _ = store.Update(ctx, l.rates, lk.key, store.Bounded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
			if g, ok := giveBack(rateValue(cur), mine, em, nuid.Next()); ok {
				mine.gave = g.Given // a retry: this write may have landed
				return json.Marshal(g)
			}
			return nil, store.ErrNoChange
		})
	}, nil
}

// budget adds the call's cost to today's counter of lk's budget (if any),
// taking it back past the budget (another call took the units since look):
// unique acknowledged totals admit exactly the calls that fit.
func (l *Limiter) budget(ctx context.Context, lk *look, now time.Time) (*Refusal, undo, error) {
	r := lk.r
	if r.Budget == nil {
		return nil, nil, nil
	}
	subject := l.budgetSubject(lk.key, now)
	total, err := l.incr(ctx, subject, r.Budget.Cost)
	if err != nil {
		return nil, nil, fmt.Errorf("limits: rule %s: %w", r.Name, err)
	}
	undo := func(ctx context.Context) { _, _ = l.incr(ctx, subject, -r.Budget.Cost) }
	switch isNew := total == r.Budget.Cost; {
	case lk.budgetRoom && !isNew:
		l.budgetRoom.Grew(-budgetBytes) // another started it since
	case !lk.budgetRoom && isNew:
		l.budgetRoom.Grew(budgetBytes) // carried on past the bound, or gone since
	}
	if total > r.Budget.Units {
		undo(context.WithoutCancel(ctx))
		return overBudget(r, now), nil, nil
	}
	return nil, undo, nil
}

// overBudget is r's refusal of a call past its budget, until the next UTC day.
func overBudget(r *Rule, now time.Time) *Refusal {
	_, next := day(now)
	return &Refusal{Rule: r.Name, Kind: KindBudget, RetryAfter: next.Sub(now)}
}

// full is r's refusal of a new count past the soft bound.
func full(r *Rule) *Refusal { return &Refusal{Rule: r.Name, Kind: KindFull, RetryAfter: time.Minute} }

// incr adds n to the counter on subject and returns its new total.
func (l *Limiter) incr(ctx context.Context, subject string, n int64) (int64, error) {
	m := nats.NewMsg(subject)
	m.Header.Set("Nats-Incr", fmt.Sprintf("%+d", n)) // signed: "+1", "-1"
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ack, err := l.js.PublishMsg(ctx, m)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(ack.Value, 10, 64)
}

// Usage is what one count has used and has left.
type Usage struct {
	Rule string `json:"rule"`
	Kind string `json:"kind"`
	// Per names the values the count is for, e.g. "user=alice".
	Per  string `json:"per"`
	Used int64  `json:"used"`
	Left int64  `json:"left"`
	// Limit is the rate's burst or the budget's units.
	Limit int64 `json:"limit"`
	// ResetMS is how long until all is back (a rate) or the day ends (a budget).
	ResetMS int64 `json:"reset_ms"`
}

// Usage reports, for every rule that would count call c (every rule when
// c.Tool is ""), what it has used and left for c's values.
func (l *Limiter) Usage(ctx context.Context, c Call) ([]Usage, error) {
	now := l.now()
	out := []Usage{}
	for i := range l.rules {
		r := &l.rules[i]
		if c.Tool != "" && !r.matches(c) {
			continue
		}
		key, per := l.key(r, c), l.per(r, c)
		if r.Rate != nil {
			u, err := l.rateUsage(ctx, r, key, now)
			if err != nil {
				return nil, err
			}
			u.Per = per
			out = append(out, u)
		}
		if r.Budget != nil {
			used, _, err := l.counter(ctx, l.budgetSubject(key, now))
			if err != nil {
				return nil, err
			}
			_, next := day(now)
			out = append(out, Usage{Rule: r.Name, Kind: KindBudget, Per: per, Used: used, Left: max(0, r.Budget.Units-used),
				Limit: r.Budget.Units, ResetMS: next.Sub(now).Milliseconds()})
		}
	}
	return out, nil
}

// value is c's value of the dimension p.
func (l *Limiter) value(p string, c Call) string {
	switch p {
	case PerTool:
		return c.Tool
	case PerUser:
		if c.User == "" && c.Login != "" {
			return "nats:" + c.Login
		}
		return c.User
	case PerSession:
		return c.Session
	case PerTenant:
		return l.tenants[c.User]
	}
	return ""
}

// per names the values of c a count of r is for, e.g. "user=alice".
func (l *Limiter) per(r *Rule, c Call) string {
	var parts []string
	for _, p := range r.Per {
		parts = append(parts, p+"="+l.value(p, c))
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, ",")
}

func (l *Limiter) rateUsage(ctx context.Context, r *Rule, key string, now time.Time) (Usage, error) {
	u := Usage{Rule: r.Name, Kind: KindRate, Limit: int64(r.Rate.Burst)}
	e, err := l.rates.Get(ctx, key)
	if err != nil && !store.IsNotFound(err) {
		return u, fmt.Errorf("limits: rule %s: %w", r.Name, err)
	}
	ahead := tat(e, now).Sub(now)
	em := r.Rate.emission()
	u.Used = min(u.Limit, int64((ahead+em-1)/em))
	u.Left = u.Limit - u.Used
	u.ResetMS = ahead.Milliseconds()
	return u, nil
}

// counter reads a budget counter's total, and whether one is kept (0,
// false: none).
func (l *Limiter) counter(ctx context.Context, subject string) (int64, bool, error) {
	m, err := l.budgets.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("limits: read %s: %w", subject, err)
	}
	var v struct {
		Val string `json:"val"`
	}
	if err := json.Unmarshal(m.Data, &v); err != nil {
		return 0, true, fmt.Errorf("limits: counter %s: %w", subject, err)
	}
	n, err := strconv.ParseInt(v.Val, 10, 64)
	return n, true, err
}

// Reset forgets what rule (every rule when "") has counted for call c's
// values: an operator's verb. It returns how many counts it cleared.
func (l *Limiter) Reset(ctx context.Context, rule string, c Call) (int, error) {
	n := 0
	now := l.now()
	for i := range l.rules {
		r := &l.rules[i]
		if rule != "" && r.Name != rule {
			continue
		}
		key := l.key(r, c)
		if r.Rate != nil {
			if err := l.rates.Purge(ctx, key); err != nil && !store.IsNotFound(err) {
				return n, fmt.Errorf("limits: reset %s: %w", r.Name, err)
			}
			n++
		}
		if r.Budget != nil {
			if err := l.budgets.Purge(ctx, jetstream.WithPurgeSubject(l.budgetSubject(key, now))); err != nil {
				return n, fmt.Errorf("limits: reset %s: %w", r.Name, err)
			}
			n++
		}
	}
	if rule != "" && n == 0 {
		return 0, fmt.Errorf("limits: no rule %s", rule)
	}
	return n, nil
}

// Dimensions a rule counts per (Rule.Per).
const (
	PerTool    = "tool"
	PerUser    = "user"
	PerSession = "session"
	PerTenant  = "tenant"
)

var dimensions = []string{PerTool, PerUser, PerSession, PerTenant}

// MaxRules bounds the rules of one deployment: Check looks at each.
const MaxRules = 256

// MaxRateSpan bounds a rate's interval times burst: the rates bucket's TTL.
const MaxRateSpan = 24 * time.Hour

// Policy is the limits block of the router configuration.
type Policy struct {
	// Rules are checked in order; a call is refused by the first it is over.
	Rules []Rule `json:"rules,omitempty"`
	// Tenants maps users to tenants (others share ""); it never comes from
	// the batch, so it cannot be claimed.
	Tenants map[string]string `json:"tenants,omitempty"`
	// MaxBytes is the soft bound (store.Bound) of each of the rates bucket
	// and the budgets stream: past it a call that needs a new count is
	// refused (KindFull), the counts held go on. Zero means
	// DefaultMaxBytes, negative no bound. The bucket's max_bytes is
	// store.HardBytes of it; the stream has none (a counter stream cannot
	// discard new, and dropping the oldest counters would reset budgets).
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// Rule is one limit.
type Rule struct {
	// Name identifies the rule in results, `toolbus limits` and the admin
	// verbs; ^[A-Za-z0-9_-]{1,64}$, unique.
	Name string `json:"name"`
	// Tools are the tools the rule counts; empty means every tool.
	Tools []string `json:"tools,omitempty"`
	// Writes, when true, restricts the rule to tools that are not
	// read_only, so write tools can have lower limits than reads.
	Writes bool `json:"writes,omitempty"`
	// Per lists what the rule counts separately: any of tool, user,
	// session, tenant. Empty means one count for every matching call.
	Per []string `json:"per,omitempty"`
	// Rate, when set, bounds calls per interval.
	Rate *Rate `json:"rate,omitempty"`
	// Budget, when set, bounds units per UTC day.
	Budget *Budget `json:"budget,omitempty"`
	// CacheHits counts result cache hits too (docs/guardrails.md).
	CacheHits bool `json:"cache_hits,omitempty"`
}

// Rate allows Calls per IntervalMS on average, and up to Burst at once.
type Rate struct {
	Calls      int   `json:"calls"`
	IntervalMS int64 `json:"interval_ms"`
	// Burst is how many calls may come at once after a quiet spell; zero: Calls.
	Burst int `json:"burst,omitempty"`
}

// Budget allows Units per UTC day; every call costs Cost units.
type Budget struct {
	Units int64 `json:"units"`
	// Cost is what one call costs; zero means 1.
	Cost int64 `json:"cost,omitempty"`
}

// emission is the GCRA's interval between two calls at the steady rate.
func (r *Rate) emission() time.Duration {
	return time.Duration(r.IntervalMS) * time.Millisecond / time.Duration(r.Calls)
}

// Check validates the configuration and applies defaults; an error changes nothing.
func (c *Policy) Check() error {
	if len(c.Rules) > MaxRules {
		return fmt.Errorf("limits: %d rules, at most %d", len(c.Rules), MaxRules)
	}
	seen := map[string]bool{}
	rules := slices.Clone(c.Rules)
	for i := range rules {
		r := &rules[i]
		if err := r.check(); err != nil {
			return err
		}
		if seen[r.Name] {
			return fmt.Errorf("limits: rule %s is defined twice", r.Name)
		}
		seen[r.Name] = true
	}
	c.Rules = rules
	return nil
}

func (r *Rule) check() error {
	if !bus.ValidName(r.Name) {
		return fmt.Errorf("limits: rule name %q must match ^[A-Za-z0-9_-]{1,64}$", r.Name)
	}
	for _, t := range r.Tools {
		if !bus.ValidName(t) {
			return fmt.Errorf("limits: rule %s: tool name %q must match ^[A-Za-z0-9_-]{1,64}$", r.Name, t)
		}
	}
	for _, p := range r.Per {
		if !slices.Contains(dimensions, p) {
			return fmt.Errorf("limits: rule %s: per %q must be one of tool, user, session, tenant", r.Name, p)
		}
	}
	if r.Rate == nil && r.Budget == nil {
		return fmt.Errorf("limits: rule %s has neither a rate nor a budget", r.Name)
	}
	if r.Rate != nil {
		rt := *r.Rate
		rt.Burst = cmp.Or(rt.Burst, rt.Calls)
		switch {
		case rt.Calls <= 0 || rt.IntervalMS <= 0 || rt.Burst <= 0:
			return fmt.Errorf("limits: rule %s: a rate needs calls > 0, interval_ms > 0 and burst >= 0", r.Name)
		case rt.emission() <= 0:
			return fmt.Errorf("limits: rule %s: %d calls per %d ms is finer than a nanosecond", r.Name, rt.Calls, rt.IntervalMS)
		case rt.emission()*time.Duration(rt.Burst) > MaxRateSpan:
			return fmt.Errorf("limits: rule %s: interval_ms / calls * burst is past %v; use a budget for that", r.Name, MaxRateSpan)
		}
		r.Rate = &rt
	}
	if r.Budget != nil {
		b := *r.Budget
		b.Cost = cmp.Or(b.Cost, 1)
		if b.Units <= 0 || b.Cost < 0 {
			return fmt.Errorf("limits: rule %s: a budget needs units > 0 and cost >= 0", r.Name)
		}
		r.Budget = &b
	}
	return nil
}

// matches reports whether the rule counts call c.
func (r *Rule) matches(c Call) bool {
	if r.Writes && c.ReadOnly || c.CacheHit && !r.CacheHits {
		return false
	}
	return len(r.Tools) == 0 || slices.Contains(r.Tools, c.Tool)
}
