package store

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

type cacheEntry struct {
	key string
	val string
	rev uint64
	op  jetstream.KeyValueOp
}

func (e cacheEntry) Bucket() string                  { return "b" }
func (e cacheEntry) Key() string                     { return e.key }
func (e cacheEntry) Value() []byte                   { return []byte(e.val) }
func (e cacheEntry) Revision() uint64                { return e.rev }
func (e cacheEntry) Created() time.Time              { return time.Time{} }
func (e cacheEntry) Delta() uint64                   { return 0 }
func (e cacheEntry) Operation() jetstream.KeyValueOp { return e.op }

func putEntry(key, val string, rev uint64) cacheEntry {
	return cacheEntry{key, val, rev, jetstream.KeyValuePut}
}
func delEntry(key string, rev uint64) cacheEntry {
	return cacheEntry{key, "", rev, jetstream.KeyValueDelete}
}

// decode keeps every value but "gone" (a put that takes the key out, as a
// parked record that was answered) and refuses "bad".
func decode(b []byte) (string, bool, error) {
	switch string(b) {
	case "bad":
		return "", false, errors.New("bad cacheEntry")
	case "gone":
		return "", false, nil
	}
	return string(b), true, nil
}

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []cacheEntry
		want    string // the value held for k ("" none)
		changed bool   // whether the last cacheEntry changed the map
	}{
		{"a put", []cacheEntry{putEntry("k", "a", 1)}, "a", true},
		{"a newer put replaces", []cacheEntry{putEntry("k", "a", 1), putEntry("k", "b", 2)}, "b", true},
		{"an older put is refused", []cacheEntry{putEntry("k", "b", 2), putEntry("k", "a", 1)}, "b", false},
		{"the same put again", []cacheEntry{putEntry("k", "a", 1), putEntry("k", "a", 1)}, "a", true},
		{"a delete", []cacheEntry{putEntry("k", "a", 1), delEntry("k", 2)}, "", true},
		{"an older put after a delete is refused", []cacheEntry{putEntry("k", "a", 1), delEntry("k", 3), putEntry("k", "a", 2)}, "", false},
		{"a put at the tombstone's revision is refused", []cacheEntry{delEntry("k", 3), putEntry("k", "a", 3)}, "", false},
		{"a newer put after a delete", []cacheEntry{delEntry("k", 3), putEntry("k", "c", 4)}, "c", true},
		{"a delete older than the value is refused", []cacheEntry{putEntry("k", "b", 5), delEntry("k", 4)}, "b", false},
		{"a put that takes the key out", []cacheEntry{putEntry("k", "a", 1), putEntry("k", "gone", 2)}, "", true},
		{"after a put that took it out, an older one is refused", []cacheEntry{putEntry("k", "gone", 2), putEntry("k", "a", 1)}, "", false},
		{"a bad cacheEntry changes nothing", []cacheEntry{putEntry("k", "a", 1), putEntry("k", "bad", 2)}, "a", false},
		{"a delete of a key never held", []cacheEntry{delEntry("k", 1)}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewCache[string](0)
			var changed bool
			for _, e := range tc.entries {
				changed, _ = m.Apply(e, decode)
			}
			if got, _ := m.Get("k"); got != tc.want {
				t.Errorf("holds %q, want %q", got, tc.want)
			}
			if changed != tc.changed {
				t.Errorf("last cacheEntry changed %v, want %v", changed, tc.changed)
			}
		})
	}
}

func TestStale(t *testing.T) {
	m := NewCache[string](0)
	m.Put("k", 5, "a")
	m.Delete("d", 7)
	for _, tc := range []struct {
		key   string
		rev   uint64
		stale bool
	}{{"k", 4, true}, {"k", 5, true}, {"k", 6, false}, {"d", 7, true}, {"d", 8, false}, {"new", 1, false}} {
		if got := m.Stale(tc.key, tc.rev); got != tc.stale {
			t.Errorf("Stale(%s, %d) = %v, want %v", tc.key, tc.rev, got, tc.stale)
		}
	}
}

// Tombstones older than keep go once there are many; younger ones stay.
func TestTombstonesPruned(t *testing.T) {
	m := NewCache[string](time.Minute)
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	m.Delete("old", 1)
	now = now.Add(2 * time.Minute)
	for i := range prunePast {
		m.Delete(string(rune('a'+i%26))+string(rune(i)), uint64(i+2))
	}
	if _, ok := m.dead["old"]; ok {
		t.Error("a tombstone older than keep survived the pruning")
	}
	if len(m.dead) != prunePast {
		t.Errorf("%d tombstones, want the %d young ones", len(m.dead), prunePast)
	}
	forever := NewCache[string](0)
	for i := range prunePast + 10 {
		forever.Delete(string(rune(i)), 1)
	}
	if len(forever.dead) != prunePast+10 {
		t.Error("a Map with keep 0 dropped tombstones")
	}
}

// DeleteOwn drops the value held whatever its revision (the process
// itself deleted the key), and its tombstone refuses the older write.
func TestDeleteOwn(t *testing.T) {
	m := NewCache[string](time.Minute)
	m.Put("k", 5, "v")
	if !m.DeleteOwn("k", 0) { // KV held nothing: the revision is unknown
		t.Fatal("the held value stayed")
	}
	if m.Put("k", 4, "old") || m.Put("k", 5, "again") {
		t.Fatal("a write at or below the held revision came back")
	}
	if !m.Put("k", 6, "new") {
		t.Fatal("a newer write refused")
	}
}
