package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
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
	s.prune(map[string]bool{"s1.r1.c1": true}, s.mark(), nil)
	if items, n, _ := s.snapshot(); n != 1 || items[0].Key != "s1.r1.c1" {
		t.Fatalf("after a poll listing c1 only: %v", items)
	}
}

// TestRecordsRevisionGuard: no read or delivery older than what the inbox
// holds changes it, a not-found drops only the revision held when the
// read began, and a poll drops only the calls held before its list.
func TestRecordsRevisionGuard(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	put := func(rev uint64, status bus.ParkStatus) func(*testing.T, *records) {
		return func(t *testing.T, s *records) { s.apply(parked(t, "c1", bus.KindConfirm, status, t0, rev)) }
	}
	del := func(rev uint64) func(*testing.T, *records) {
		return func(_ *testing.T, s *records) {
			s.apply(entry{key: "s1.r1.c1", rev: rev, op: jetstream.KeyValueDelete})
		}
	}
	// read is a refresh whose fetch answers r, after during ran (a watch
	// delivery landing while the read is in flight).
	read := func(r func(*testing.T) reading, during func(*testing.T, *records)) func(*testing.T, *records) {
		return func(t *testing.T, s *records) {
			s.fetch = func(context.Context, string) (reading, error) {
				if during != nil {
					during(t, s)
				}
				return r(t), nil
			}
			s.refresh(t.Context(), "s1.r1.c1")
		}
	}
	found := func(rev uint64, status bus.ParkStatus) func(*testing.T) reading {
		return func(t *testing.T) reading {
			var r bus.ParkRecord
			_ = json.Unmarshal(parked(t, "c1", bus.KindConfirm, status, t0, rev).val, &r)
			s := newRecords(1, false, slog.New(slog.DiscardHandler))
			it, ok := s.item("s1.r1.c1", rev, r)
			return reading{it: it, waits: ok, rev: rev}
		}
	}
	notFound := func(*testing.T) reading { return reading{} }
	failed := func(s *records) {
		s.fetch = func(context.Context, string) (reading, error) { return reading{}, errors.New("no responders") }
		s.refresh(context.Background(), "s1.r1.c1")
	}
	for _, tc := range []struct {
		name  string
		steps []func(*testing.T, *records)
		want  uint64 // the revision held, 0 for none
	}{
		{"older put after a newer put", []func(*testing.T, *records){put(5, bus.ParkParked), put(3, bus.ParkParked)}, 5},
		{"older put after the call ended", []func(*testing.T, *records){put(5, bus.ParkParked), put(6, bus.ParkDone), put(5, bus.ParkParked)}, 0},
		{"older put after a delete", []func(*testing.T, *records){put(5, bus.ParkParked), del(7), put(6, bus.ParkParked)}, 0},
		{"older delete after a newer put", []func(*testing.T, *records){put(5, bus.ParkParked), del(4)}, 5},
		{"an older read after a newer put", []func(*testing.T, *records){put(5, bus.ParkParked), read(found(3, bus.ParkParked), nil)}, 5},
		{"a read that lands after the answer's delivery", []func(*testing.T, *records){put(5, bus.ParkParked),
			read(found(5, bus.ParkParked), put(6, bus.ParkDone))}, 0},
		{"not found while held", []func(*testing.T, *records){put(5, bus.ParkParked), read(notFound, nil)}, 0},
		{"not found, then the late delivery it outran, then the answer", []func(*testing.T, *records){put(5, bus.ParkParked),
			read(notFound, nil), put(5, bus.ParkParked), put(6, bus.ParkDone)}, 0},
		{"a record that ended, read after a newer delivery", []func(*testing.T, *records){put(5, bus.ParkParked),
			read(found(6, bus.ParkDone), put(7, bus.ParkParked))}, 7},
		{"not found while a newer put lands", []func(*testing.T, *records){put(5, bus.ParkParked), read(notFound, put(8, bus.ParkParked))}, 8},
		{"not found, nothing held", []func(*testing.T, *records){read(notFound, nil)}, 0},
		{"a newer read", []func(*testing.T, *records){put(5, bus.ParkParked), read(found(9, bus.ParkParked), nil)}, 9},
		{"a read that fails keeps the call", []func(*testing.T, *records){put(5, bus.ParkParked), func(_ *testing.T, s *records) { failed(s) }}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRecords(500, false, slog.New(slog.DiscardHandler))
			for _, step := range tc.steps {
				step(t, s)
			}
			it, ok := s.lookup("s1.r1.c1")
			if got := map[bool]uint64{true: it.Revision}[ok]; got != tc.want {
				t.Fatalf("holds revision %d (held: %v), want %d", got, ok, tc.want)
			}
		})
	}
}

// TestRecordsPruneKeepsFresh: a poll whose list was asked for before a
// fresh read found a call does not drop it; the next poll that still does
// not list it does, and one that lists it again brings it back.
func TestRecordsPruneKeepsFresh(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	s := newRecords(500, true, slog.New(slog.DiscardHandler))
	s.apply(parked(t, "c1", bus.KindConfirm, bus.ParkParked, t0, 1))
	mark := s.mark()
	s.apply(parked(t, "c2", bus.KindConfirm, bus.ParkParked, t0, 2)) // read while the list was made
	s.prune(map[string]bool{}, mark, nil)
	if _, ok := s.lookup("s1.r1.c1"); ok {
		t.Fatal("a call held before the list and not listed stays")
	}
	if _, ok := s.lookup("s1.r1.c2"); !ok {
		t.Fatal("a call read after the list was asked for was dropped")
	}
	s.prune(map[string]bool{}, s.mark(), nil)
	if _, ok := s.lookup("s1.r1.c2"); ok {
		t.Fatal("the next poll kept a call it does not list")
	}
	// That list may have come from a router whose cache lagged: the next
	// poll that lists the call brings it back.
	s.apply(parked(t, "c2", bus.KindConfirm, bus.ParkParked, t0, 2))
	if _, ok := s.lookup("s1.r1.c2"); !ok {
		t.Fatal("a call a poll left out does not come back")
	}
}

func TestGateAuthorized(t *testing.T) {
	g := &Server{cfg: Config{Token: "0123456789abcdef0123"}, guess: make(chan struct{}, 1)}
	h := g.guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, tc := range []struct {
		name           string
		cookie, header string
		want           bool
	}{
		{"none", "", "", false},
		{"cookie", g.cfg.Token, "", false}, // no cookie carries the token (session 38)
		{"header", "", g.cfg.Token, true},
		{"wrong header", "", "x", false},
		{"prefix only", "", g.cfg.Token[:16], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/api/calls", nil)
			if tc.cookie != "" {
				r.Header.Set("Cookie", "toolbus_inbox="+tc.cookie)
			}
			if tc.header != "" {
				r.Header.Set(TokenHeader, tc.header)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if got := w.Code == http.StatusTeapot; got != tc.want {
				t.Fatalf("authorized = %v (%d), want %v", got, w.Code, tc.want)
			}
		})
	}
	if (&Server{}).same(nil, "") {
		t.Fatal("an empty token matches an empty gate")
	}
}

// TestActUnreadableIsNotGone: a call the inbox has not listed yet (parked a
// moment ago) whose read fails (a router's parked.list timed out, or
// refused while its cache is behind the store) is not reported gone: the
// read is tried readTries times, then the answer is refused unavailable
// and nothing is sent. A read that succeeds on a later try is applied.
func TestActUnreadableIsNotGone(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	s := &Server{records: newRecords(500, true, slog.New(slog.DiscardHandler))}
	tries := 0
	s.fetch = func(context.Context, string) (reading, error) {
		tries++
		return reading{}, errors.New("internal: parked.list: this router's cache of parked calls is behind the store")
	}
	code, out := s.act(t.Context(), Act{Key: "s1.r1.c1", Revision: 5, Action: "allow"})
	if code != 503 || out.OK || out.Code != bus.CodeUnavailable || tries != readTries {
		t.Fatalf("act on an unreadable call: %d %+v after %d reads; want 503 unavailable after %d", code, out, tries, readTries)
	}

	tries = 0
	s.fetch = func(context.Context, string) (reading, error) {
		if tries++; tries < readTries {
			return reading{}, errors.New("timeout")
		}
		var r bus.ParkRecord
		_ = json.Unmarshal(parked(t, "c1", bus.KindConfirm, bus.ParkParked, t0, 5).val, &r)
		it, ok := s.item("s1.r1.c1", 5, r)
		return reading{it: it, waits: ok, rev: 5}, nil
	}
	if err := s.refresh(t.Context(), "s1.r1.c1"); err != nil {
		t.Fatal(err)
	}
	if it, ok := s.lookup("s1.r1.c1"); !ok || it.Revision != 5 {
		t.Fatalf("after a read that succeeded on try %d: held %v at %d", tries, ok, it.Revision)
	}
}
