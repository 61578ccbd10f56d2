package bus

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// Event ids have nuid's form (22 characters of [0-9A-Za-z]) and are
// unique, from many goroutines at once (each P its own generator).
func TestEventIDsUnique(t *testing.T) {
	const goroutines, per = 8, 20000
	ids := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				ids[g] = append(ids[g], Head(TypeExec, "s").ID)
			}
		}()
	}
	wg.Wait()
	seen := make(map[string]bool, goroutines*per)
	for _, list := range ids {
		for _, id := range list {
			if len(id) != idLen || strings.Trim(id, digits) != "" {
				t.Fatalf("id %q is not 22 characters of [0-9A-Za-z]", id)
			}
			if seen[id] {
				t.Fatalf("id %q made twice", id)
			}
			seen[id] = true
		}
	}
}

// A generator whose sequence overflows takes a new prefix, and goes on
// making ids of the same form.
func TestIDGenOverflow(t *testing.T) {
	var g idGen
	first := string(g.append(nil))
	g.seq = maxSeq - 1
	next := string(g.append(nil))
	if next[:preLen] == first[:preLen] {
		t.Errorf("prefix %q kept past the sequence's end", first[:preLen])
	}
	if len(next) != idLen || strings.Trim(next, digits) != "" {
		t.Errorf("id %q after overflow", next)
	}
	if g.seq >= maxSeq || g.inc < minInc || g.inc >= maxInc {
		t.Errorf("sequence %d, step %d after overflow", g.seq, g.inc)
	}
}

// The time attribute is what the formatting before carving gave:
// time.Format with the attribute's layout, in UTC, of a time between the
// calls around it (to the millisecond).
func TestHeadTime(t *testing.T) {
	for range 100 {
		before := time.Now().UTC().Truncate(time.Millisecond)
		e := Head(TypeExec, "s")
		after := time.Now().UTC()
		got, err := time.Parse(timeLayout, e.Time)
		if err != nil {
			t.Fatal(err)
		}
		if got.Before(before) || got.After(after) {
			t.Fatalf("time %s not between %s and %s", e.Time, before.Format(timeLayout), after.Format(timeLayout))
		}
		if want := got.UTC().Format(timeLayout); e.Time != want {
			t.Fatalf("time %q, formatted before as %q", e.Time, want)
		}
		if !strings.HasSuffix(e.Time, "Z") || len(e.Time) != len("2006-01-02T15:04:05.000Z") {
			t.Fatalf("time %q is not UTC with milliseconds", e.Time)
		}
	}
}

// FormatExpiry gives what the router wrote before (t.UTC().Format with
// time.RFC3339Nano), for whole seconds, trailing zeros, other zones, and
// years past 9999 (longer than a block's carve: an array of their own).
func TestFormatExpiry(t *testing.T) {
	oslo := time.FixedZone("x", 3600+1800)
	times := []time.Time{
		time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 4, 23, 0, 0, 120000000, time.UTC),
		time.Date(2026, 12, 4, 23, 0, 0, 123456789, oslo),
		time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(12026, 1, 1, 0, 0, 0, 999999999, oslo),
		time.Now(),
		time.Now().Add(300 * time.Second),
	}
	for _, tm := range times {
		if got, want := FormatExpiry(tm), tm.UTC().Format(time.RFC3339Nano); got != want {
			t.Errorf("FormatExpiry(%v) = %q, want %q", tm, got, want)
		}
	}
	e := Event{ExpiryTime: FormatExpiry(times[2])}
	if got, err := e.Expiry(); err != nil || !got.Equal(times[2]) {
		t.Errorf("Expiry() = %v, %v; want %v", got, err, times[2])
	}
}

// Head's id and time take no allocation of their own: a block now and
// then (internal/slab).
func TestHeadAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations differ under the race detector")
	}
	var sink Event
	got := testing.AllocsPerRun(10000, func() { sink = Head(TypeExec, "s") })
	if got > 0 {
		t.Errorf("%.2f allocations per Head, want less than one", got)
	}
	_ = sink
	got = testing.AllocsPerRun(10000, func() { sink.ExpiryTime = FormatExpiry(time.Now()) })
	if got > 0 {
		t.Errorf("%.2f allocations per FormatExpiry, want less than one", got)
	}
}

// EventsMsg and CallMsg name what Events and Call name, a long session
// too (an array of its own), without an allocation per subject.
func TestEventsMsg(t *testing.T) {
	for _, prefix := range []string{"", "tb", strings.Repeat("p", 100)} {
		s := NewSubjects(prefix)
		for _, session := range []string{"s1", strings.Repeat("a", 128)} {
			if got, want := s.EventsMsg(session), s.Events(session); got != want {
				t.Errorf("EventsMsg(%q) = %q, want %q", session, got, want)
			}
			if got, want := CallMsg(s, session), s.Call(session); got != want {
				t.Errorf("CallMsg(%q) = %q, want %q", session, got, want)
			}
		}
	}
	if raceEnabled {
		return
	}
	s := NewSubjects("")
	var sink string
	if got := testing.AllocsPerRun(10000, func() { sink = s.EventsMsg("session-1") }); got > 0 {
		t.Errorf("%.2f allocations per EventsMsg, want less than one", got)
	}
	if got := testing.AllocsPerRun(10000, func() { sink = CallMsg(s, "session-1") }); got > 0 {
		t.Errorf("%.2f allocations per CallMsg, want less than one", got)
	}
	_ = sink
}

// BenchmarkHead is an event's head: its id and time (and, in parallel,
// from every P at once).
func BenchmarkHead(b *testing.B) {
	var sink Event
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = Head(TypeExec, "s")
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				e := Head(TypeExec, "s")
				_ = e
			}
		})
	})
	_ = sink
}
