package parked

import (
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// The cache of call records is tested alone here, without a server.

type kvEntry struct {
	key string
	val []byte
	rev uint64
	op  jetstream.KeyValueOp
}

func (e kvEntry) Bucket() string                  { return "toolbus_parked" }
func (e kvEntry) Key() string                     { return e.key }
func (e kvEntry) Value() []byte                   { return e.val }
func (e kvEntry) Revision() uint64                { return e.rev }
func (e kvEntry) Created() time.Time              { return time.Time{} }
func (e kvEntry) Delta() uint64                   { return 0 }
func (e kvEntry) Operation() jetstream.KeyValueOp { return e.op }

func rec(session, reply, id string, st bus.ParkStatus, at time.Time) *Record {
	return &Record{Session: session, ReplyID: reply, Call: bus.Call{ID: id, Name: "t"}, Status: st, Created: at, Expires: at.Add(time.Hour), Touched: at}
}

func put(t *testing.T, r *Record, rev uint64) kvEntry {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return kvEntry{key: r.Key(), val: b, rev: rev, op: jetstream.KeyValuePut}
}

func keys(rs []*Record) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.Key())
	}
	return out
}

func TestCallCacheApply(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name             string
		entries          func(t *testing.T) []kvEntry
		parked, answered []string
	}{
		{"parked", func(t *testing.T) []kvEntry {
			return []kvEntry{put(t, rec("s", "r", "a", bus.ParkParked, t0), 1)}
		}, []string{"s.r.a"}, []string{}},
		{"answered leaves parked", func(t *testing.T) []kvEntry {
			return []kvEntry{put(t, rec("s", "r", "a", bus.ParkParked, t0), 1), put(t, rec("s", "r", "a", bus.ParkAnswered, t0), 2)}
		}, []string{}, []string{"s.r.a"}},
		{"done leaves both", func(t *testing.T) []kvEntry {
			return []kvEntry{put(t, rec("s", "r", "a", bus.ParkAnswered, t0), 2), put(t, rec("s", "r", "a", bus.ParkDone, t0), 3)}
		}, []string{}, []string{}},
		{"a late older put cannot bring it back", func(t *testing.T) []kvEntry {
			return []kvEntry{put(t, rec("s", "r", "a", bus.ParkDone, t0), 3), put(t, rec("s", "r", "a", bus.ParkParked, t0), 1)}
		}, []string{}, []string{}},
		{"deleted", func(t *testing.T) []kvEntry {
			return []kvEntry{put(t, rec("s", "r", "a", bus.ParkAnswered, t0), 1), {key: "s.r.a", rev: 2, op: jetstream.KeyValueDelete}}
		}, []string{}, []string{}},
		{"corrupt ignored", func(t *testing.T) []kvEntry {
			return []kvEntry{{key: "s.r.a", val: []byte("{"), rev: 1, op: jetstream.KeyValuePut}}
		}, []string{}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCalls(shared{cfg: Config{Logger: slog.New(slog.DiscardHandler)}}, bus.Subjects{})
			for _, e := range tc.entries(t) {
				c.apply(e)
			}
			ans := c.answeredBefore(t0.Add(time.Second))
			slices.Sort(ans)
			if got := keys(c.list("", "")); !slices.Equal(got, tc.parked) || !slices.Equal(append([]string{}, ans...), tc.answered) {
				t.Fatalf("parked %v answered %v, want %v and %v", got, ans, tc.parked, tc.answered)
			}
		})
	}
}

func TestCallCacheNoteAndQueries(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	c := newCalls(shared{cfg: Config{Logger: slog.New(slog.DiscardHandler)}}, bus.Subjects{})
	for i, r := range []*Record{rec("s1", "r1", "b", bus.ParkParked, t0.Add(2*time.Second)), rec("s1", "r1", "a", bus.ParkParked, t0),
		rec("s1", "r2", "c", bus.ParkParked, t0.Add(time.Second)), rec("s2", "r1", "d", bus.ParkParked, t0.Add(3*time.Hour))} {
		r.Rev = uint64(i + 1)
		c.note(r.Key(), r)
	}
	for _, tc := range []struct {
		session, reply string
		want           []string
	}{
		{"", "", []string{"s1.r1.a", "s1.r2.c", "s1.r1.b", "s2.r1.d"}},
		{"s1", "", []string{"s1.r1.a", "s1.r2.c", "s1.r1.b"}},
		{"s1", "r1", []string{"s1.r1.a", "s1.r1.b"}},
		{"s3", "", []string{}},
	} {
		if got := keys(c.list(tc.session, tc.reply)); !slices.Equal(got, tc.want) {
			t.Errorf("Parked(%q, %q) = %v, want %v", tc.session, tc.reply, got, tc.want)
		}
	}
	exp := keys(c.expired(t0.Add(time.Hour + 90*time.Minute)))
	slices.Sort(exp)
	if !slices.Equal(exp, []string{"s1.r1.a", "s1.r1.b", "s1.r2.c"}) {
		t.Errorf("Expired = %v", exp)
	}
	// A record noted as it leaves parked is a tombstone: an older
	// delivery of the parked one does not list it again.
	gone := rec("s1", "r1", "a", bus.ParkDone, t0)
	gone.Rev = 10
	c.note(gone.Key(), gone)
	c.apply(put(t, rec("s1", "r1", "a", bus.ParkParked, t0), 2))
	if got := keys(c.list("s1", "r1")); !slices.Equal(got, []string{"s1.r1.b"}) {
		t.Errorf("after the call left: Parked = %v", got)
	}
	// The cache holds a copy: the caller's record is its own.
	mine := rec("s9", "r9", "z", bus.ParkParked, t0)
	mine.Rev = 1
	c.note(mine.Key(), mine)
	mine.Reason = "changed"
	if c.list("s9", "")[0].Reason != "" {
		t.Error("note kept the caller's record, not a copy")
	}
}
