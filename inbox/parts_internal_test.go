package inbox

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// The parts of Server are tested alone here, without a server.

// entry is a KV entry for records.apply.
type entry struct {
	key string
	val []byte
	rev uint64
	op  jetstream.KeyValueOp
}

func (e entry) Bucket() string                  { return "toolbus_parked" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.val }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

func parked(t *testing.T, id, kind string, status bus.ParkStatus, created time.Time, rev uint64) entry {
	t.Helper()
	r := bus.ParkRecord{Session: "s1", ReplyID: "r1", Call: bus.Call{ID: id, Name: "deploy", Input: json.RawMessage(`{"env":"prod"}`)},
		Kind: kind, Status: status, Created: created}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return entry{key: "s1.r1." + id, val: b, rev: rev, op: jetstream.KeyValuePut}
}

func TestRecordsApply(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		approver bool
		entries  func(t *testing.T) []entry
		want     []string // keys listed, oldest first
		note     bool     // the first one carries a note
	}{
		{"parked confirm", false, func(t *testing.T) []entry {
			return []entry{parked(t, "c1", bus.KindConfirm, bus.ParkParked, t0, 1)}
		}, []string{"s1.r1.c1"}, false},
		{"oldest first", false, func(t *testing.T) []entry {
			return []entry{parked(t, "c2", bus.KindConfirm, bus.ParkParked, t0.Add(time.Second), 2),
				parked(t, "c1", bus.KindExternal, bus.ParkParked, t0, 1)}
		}, []string{"s1.r1.c1", "s1.r1.c2"}, false},
		{"answered leaves", false, func(t *testing.T) []entry {
			return []entry{parked(t, "c1", bus.KindConfirm, bus.ParkParked, t0, 1),
				parked(t, "c1", bus.KindConfirm, bus.ParkAnswered, t0, 2)}
		}, nil, false},
		{"a late older revision is ignored", false, func(t *testing.T) []entry {
			return []entry{parked(t, "c1", bus.KindConfirm, bus.ParkParked, t0, 3),
				parked(t, "c1", bus.KindConfirm, bus.ParkParked, t0.Add(time.Hour), 2)}
		}, []string{"s1.r1.c1"}, false},
		{"deleted", false, func(t *testing.T) []entry {
			e := parked(t, "c1", bus.KindConfirm, bus.ParkParked, t0, 1)
			return []entry{e, {key: e.key, rev: 2, op: jetstream.KeyValueDelete}}
		}, nil, false},
		{"corrupt ignored", false, func(t *testing.T) []entry {
			return []entry{{key: "s1.r1.c1", val: []byte("{"), rev: 1, op: jetstream.KeyValuePut}}
		}, nil, false},
		{"approver: an external call has a note", true, func(t *testing.T) []entry {
			return []entry{parked(t, "c1", bus.KindExternal, bus.ParkParked, t0, 1)}
		}, []string{"s1.r1.c1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRecords(500, tc.approver, slog.New(slog.DiscardHandler))
			_, _, changed := s.snapshot()
			for _, e := range tc.entries(t) {
				s.apply(e)
			}
			items, n, _ := s.snapshot()
			var keys []string
			for _, it := range items {
				keys = append(keys, it.Key)
			}
			if !slices.Equal(keys, tc.want) || n != len(tc.want) {
				t.Fatalf("listed %v (total %d), want %v", keys, n, tc.want)
			}
			if len(items) > 0 && (items[0].Note != "") != tc.note {
				t.Fatalf("note %q, want one: %v", items[0].Note, tc.note)
			}
			if len(items) > 0 && items[0].InputDigest != bus.InputDigest(json.RawMessage(`{"env":"prod"}`)) {
				t.Fatalf("digest %q not derived from the input", items[0].InputDigest)
			}
			select {
			case <-changed:
			default:
				if len(tc.want) > 0 {
					t.Fatal("a change did not close the channel")
				}
			}
		})
	}
}

func TestRecordsBoundAndAbsent(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	s := newRecords(2, false, slog.New(slog.DiscardHandler))
	for i, id := range []string{"c3", "c1", "c2"} {
		s.apply(parked(t, id, bus.KindConfirm, bus.ParkParked, t0.Add(time.Duration(i)*time.Second), uint64(i+1)))
	}
	items, n, _ := s.snapshot()
	if n != 3 || len(items) != 2 || items[0].Key != "s1.r1.c3" {
		t.Fatalf("snapshot %d of %d, first %v: want 2 of 3, oldest first", len(items), n, items)
	}
	gone := s.absent(map[string]bool{"s1.r1.c1": true})
	slices.Sort(gone)
	if !slices.Equal(gone, []string{"s1.r1.c2", "s1.r1.c3"}) {
		t.Fatalf("absent %v", gone)
	}
	s.drop("s1.r1.c2")
	if _, ok := s.lookup("s1.r1.c2"); ok {
		t.Fatal("dropped call still listed")
	}
}

func TestGateAuthorized(t *testing.T) {
	g := &Server{cfg: Config{Token: "0123456789abcdef0123"}}
	for _, tc := range []struct {
		name           string
		cookie, header string
		want           bool
	}{
		{"none", "", "", false},
		{"cookie", g.cfg.Token, "", true},
		{"header", "", g.cfg.Token, true},
		{"wrong cookie", "0123456789abcdef0124", "", false},
		{"wrong header", "", "x", false},
		{"prefix only", g.cfg.Token[:16], "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if tc.cookie != "" {
				r.Header.Set("Cookie", CookieName+"="+tc.cookie)
			}
			if tc.header != "" {
				r.Header.Set(TokenHeader, tc.header)
			}
			if got := g.authorized(r); got != tc.want {
				t.Fatalf("authorized = %v, want %v", got, tc.want)
			}
		})
	}
	if (&Server{}).same("") {
		t.Fatal("an empty token matches an empty gate")
	}
}
