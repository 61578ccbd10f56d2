package router

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/parked"
)

// TestParkedListPages: parked.list's pages (docs/protocol.md 9) stay under
// their bound, list every call once in (created, key) order across pages,
// leave out only an input that does not fit, and list calls parked
// between two pages without skipping or repeating one.
func TestParkedListPages(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	rec := func(session string, i, inputLen int) *parked.Record {
		input, _ := json.Marshal(map[string]string{"x": strings.Repeat("x", inputLen)})
		return &parked.Record{Session: session, ReplyID: fmt.Sprintf("r%d", i), Call: bus.Call{ID: "c1", Name: "ask", Input: input},
			Kind: bus.KindConfirm, Status: bus.ParkParked, Created: t0.Add(time.Duration(i/2) * time.Second), Expires: t0.Add(time.Hour), Rev: uint64(i + 1)}
	}
	entryLen := func(r *parked.Record) int { return encodedLen(parkedEntry(r)) + 1 }
	small := []*parked.Record{rec("a", 0, 10), rec("b", 1, 10), rec("a", 2, 10), rec("c", 3, 10)}
	exact := len(`{"parked":[]}`)
	for _, r := range small {
		exact += entryLen(r)
	}
	huge := rec("h", 1, 1<<12)
	for _, tc := range []struct {
		name  string
		recs  []*parked.Record
		bound int
		limit int
		pages int // how many pages list them all
		omit  []string
	}{
		{name: "empty", recs: nil, bound: 1 << 20, pages: 1},
		{name: "one page", recs: small, bound: 1 << 20, pages: 1},
		{name: "exactly at the bound", recs: small, bound: exact, pages: 1},
		{name: "one byte under: the last input left out", recs: small, bound: exact - 1, pages: 1, omit: []string{bus.CallKey("c", "r3", "c1")}},
		{name: "two pages", recs: small, bound: exact - entryLen(small[3]) + 5, pages: 2},
		{name: "limit", recs: small, bound: 1 << 20, limit: 1, pages: 4},
		{name: "an entry larger than the bound", recs: []*parked.Record{rec("a", 0, 10), huge, rec("b", 2, 10)}, bound: 1 << 10, pages: 1,
			omit: []string{huge.Key()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got, omitted []string
			after, pages := parkedCursor{}, 0
			for {
				page := parkedPage(slices.Clone(tc.recs), after, tc.limit, tc.bound, 0)
				pages++
				if b, _ := json.Marshal(bus.ParkedPage{Parked: page.Parked}); len(b) > tc.bound && len(page.Parked) > 1 {
					t.Fatalf("page %d is %d bytes, bound %d", pages, len(b), tc.bound)
				}
				for _, p := range page.Parked {
					key := bus.CallKey(p.Session, p.ReplyID, p.ID)
					got = append(got, key)
					if p.InputOmitted != (len(p.Input) == 0) {
						t.Fatalf("%s: input_omitted %v with %d bytes of input", key, p.InputOmitted, len(p.Input))
					}
					if p.InputOmitted {
						omitted = append(omitted, key)
					}
				}
				if page.Next == "" {
					break
				}
				var err error
				if after, err = parseParkedCursor(page.Next); err != nil || pages > 10 {
					t.Fatalf("next %q: %v (page %d)", page.Next, err, pages)
				}
			}
			if !sameOrdered(got, tc.recs) || pages != tc.pages || !slices.Equal(omitted, tc.omit) {
				t.Fatalf("listed %v in %d pages (omitted %v); want %d calls in %d pages (omitted %v)", got, pages, omitted, len(tc.recs), tc.pages, tc.omit)
			}
		})
	}
	t.Run("parks between pages", func(t *testing.T) {
		recs := slices.Clone(small)
		page := parkedPage(slices.Clone(recs), parkedCursor{}, 2, 1<<20, 0)
		seen := map[string]int{}
		for _, p := range page.Parked {
			seen[bus.CallKey(p.Session, p.ReplyID, p.ID)]++
		}
		// Parked meanwhile: later than every call (the usual), and at the
		// same second as the last listed one with a key after it.
		late, tie := rec("d", 9, 10), rec("b", 1, 10)
		tie.ReplyID = "r9"
		recs = append(recs, late, tie)
		for page.Next != "" {
			after, err := parseParkedCursor(page.Next)
			if err != nil {
				t.Fatal(err)
			}
			page = parkedPage(slices.Clone(recs), after, 2, 1<<20, 0)
			for _, p := range page.Parked {
				seen[bus.CallKey(p.Session, p.ReplyID, p.ID)]++
			}
		}
		for _, r := range recs {
			if seen[r.Key()] != 1 {
				t.Fatalf("%s listed %d times across the pages (%v)", r.Key(), seen[r.Key()], seen)
			}
		}
	})
	for _, bad := range []string{"x", "2026-12-06T10:00:00Z", "2026-12-06 a.r.c"} {
		if _, err := parseParkedCursor(bad); err == nil {
			t.Errorf("after %q accepted", bad)
		}
	}
}

// sameOrdered: keys are recs' keys in the order (created, key).
func sameOrdered(keys []string, recs []*parked.Record) bool {
	sorted := slices.Clone(recs)
	slices.SortFunc(sorted, func(a, b *parked.Record) int {
		return parkedCursor{a.Created, a.Key()}.compare(b) * -1
	})
	want := make([]string, len(sorted))
	for i, r := range sorted {
		want[i] = r.Key()
	}
	return slices.Equal(keys, want)
}

// TestReplyPastMaxPayload (session 17's red team, TestAttackReplyPastMaxPayload
// before parked.list had pages): a reply no message can carry is answered
// io.toolbus.error limit_exceeded, not dropped.
func TestReplyPastMaxPayload(t *testing.T) {
	s := testkit.RunServer(t)
	nc, ask := testkit.Connect(t, s), testkit.Connect(t, s)
	w := &wire{nc: nc, subj: bus.NewSubjects(""), source: "toolbus/router/r1", log: slog.New(slog.DiscardHandler),
		m: metrics.NewRouter(nil, metrics.RouterSources{})}
	big := strings.Repeat("x", int(nc.MaxPayload()))
	sub, err := nc.Subscribe("toolbus.admin.big", func(m *nats.Msg) {
		w.answer(m, bus.TypeAdminReply, map[string]string{"x": big}, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	m, err := ask.Request("toolbus.admin.big", nil, 10*time.Second)
	if err != nil {
		t.Fatalf("a reply past the max payload: %v", err)
	}
	ev, err := bus.Decode(m)
	if err != nil || ev.Type != bus.TypeError || !strings.Contains(string(ev.Data), bus.CodeLimitExceeded) {
		t.Fatalf("reply %v %.200s (%v)", ev, m.Data, err)
	}
}

// TestAttackParkedPageLargeContext: a batch's context (or user), which
// each of its parked calls carries, as large as an input: a call whose entry
// passes the page's bound even without its input made a page past it (the
// reply limit_exceeded, parked.list of every session failing while it
// stayed parked), and many such calls filled page after page. Such an entry
// is listed without its context and user too (session 28, the lead's
// review of the inbox28 fix).
func TestAttackParkedPageLargeContext(t *testing.T) {
	const bound = 64 << 10
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	rec := func(i, contextLen int) *parked.Record {
		big, _ := json.Marshal(map[string]string{"pad": strings.Repeat("x", contextLen)})
		return &parked.Record{Session: "h", ReplyID: fmt.Sprintf("r%d", i), Call: bus.Call{ID: "c1", Name: "ask", Input: json.RawMessage(`{}`)},
			Kind: bus.KindConfirm, Status: bus.ParkParked, Created: t0.Add(time.Duration(i) * time.Second), Expires: t0.Add(time.Hour), Rev: uint64(i + 1),
			Context: big, User: json.RawMessage(`"mallory"`)}
	}
	page := parkedPage([]*parked.Record{rec(0, bound)}, parkedCursor{}, 0, bound, 0)
	if n := encodedLen(page); n > bound || len(page.Parked) != 1 || !page.Parked[0].InputOmitted || page.Parked[0].Context != nil || page.Parked[0].User != nil {
		t.Fatalf("a call of a %d-byte context: a page of %d bytes at a bound of %d, %+v", bound, n, bound, page.Parked)
	}
	// 100 calls of 8 KiB contexts, then another session's call: every page
	// under the bound, the victim on the third (13 pages if contexts were
	// always listed), each page's first calls whole.
	var recs []*parked.Record
	for i := range 100 {
		recs = append(recs, rec(i, 8<<10))
	}
	victim := rec(100, 0)
	victim.Session = "v"
	recs = append(recs, victim)
	var after parkedCursor
	for pages := 1; ; pages++ {
		page = parkedPage(recs, after, 0, bound, 0)
		if n := encodedLen(page); n > bound || page.Parked[0].Context == nil {
			t.Fatalf("page %d: %d bytes (bound %d), its first call without its context", pages, n, bound)
		}
		if last := page.Parked[len(page.Parked)-1]; last.Session == "v" {
			if pages > 3 {
				t.Errorf("the other session's call on page %d", pages)
			}
			break
		}
		if page.Next == "" || pages == 20 {
			t.Fatalf("page %d: no next, the other session's call not listed", pages)
		}
		var err error
		if after, err = parseParkedCursor(page.Next); err != nil {
			t.Fatal(err)
		}
	}
}

// TestParkedFit: the reply's parked list keeps every input while it fits
// the max payload less parkedPageSlack beside the results; past that, each
// call that does not fit in what is left is listed without its input, with
// its digest (protocol 3.2, 1.19), and every call stays listed.
func TestParkedFit(t *testing.T) {
	in := json.RawMessage(`{"x":"` + strings.Repeat("x", 3000) + `"}`)
	ps := []bus.Parked{{ID: "c0", Name: "ask", Kind: bus.KindQueued}, {ID: "c1", Name: "ask", Input: in, Kind: bus.KindExternal},
		{ID: "c2", Name: "ask", Input: in, Kind: bus.KindExternal}}
	whole := encodedLen(ps)
	for _, row := range []struct {
		name        string
		used, limit int
		omitted     []bool
	}{
		{"fits exactly", 0, whole + parkedPageSlack, []bool{false, false, false}},
		{"a byte over", 1, whole + parkedPageSlack, []bool{false, false, true}},
		{"results take one", 3000, whole + parkedPageSlack, []bool{false, false, true}},
		{"results take more", 4000, whole + parkedPageSlack, []bool{false, true, true}},
		{"no room", 1 << 20, whole + parkedPageSlack, []bool{false, true, true}},
	} {
		s := reportStep{maxPayload: func() int64 { return int64(row.limit) }}
		got := s.parkedFit(ps, row.used)
		for i, p := range got {
			if p.ID != ps[i].ID || p.InputOmitted != row.omitted[i] || p.InputOmitted && (p.Input != nil || p.InputDigest != bus.InputDigest(in)) {
				t.Fatalf("%s: %s listed with input_omitted %v, %d input bytes, digest %q", row.name, p.ID, p.InputOmitted, len(p.Input), p.InputDigest)
			}
		}
		if len(got) != len(ps) || ps[1].Input == nil || ps[2].Input == nil {
			t.Fatalf("%s: %d listed, or the batch's own list changed", row.name, len(got))
		}
	}
	if got := (reportStep{}).parkedFit(ps, 1<<30); len(got) != 3 || got[2].InputOmitted {
		t.Fatal("no payload limit: the list changed")
	}
}
