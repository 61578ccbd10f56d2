package search

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// ranked is a search's result by document key, with exact scores.
type ranked struct {
	Key   string
	Score float64
}

func rank(ix *Index, query string, k int) []ranked {
	var out []ranked
	for _, h := range ix.Search(query, k, nil) {
		out = append(out, ranked{ix.docs[h.Doc].key, h.Score})
	}
	return out
}

var vocabulary = []string{"create", "read", "update", "delete", "list", "issue", "file", "user", "invoice", "weather",
	"ticket", "repo", "branch", "email", "calendar", "a", "the", "of", "forecast", "payment"}

// genDoc makes document number n (its key "t<n>") from r: a name and a
// description of words of the vocabulary, with weights.
func genDoc(r *rand.Rand, n int) Doc {
	words := func(k int) string {
		s := ""
		for range k {
			s += vocabulary[r.IntN(len(vocabulary))] + " "
		}
		return s
	}
	return Doc{Key: fmt.Sprintf("t%d", n), Fields: []Field{
		{Text: words(1+r.IntN(3)) + fmt.Sprintf("t%d", n), Weight: 3},
		{Text: words(r.IntN(12))},
		{Text: words(r.IntN(3)), Weight: 2},
	}}
}

var queries = []string{"create an issue", "weather forecast", "the", "payment invoice of a user", "delete file", "nothing", "t3", "list repo branch ticket"}

// sameRanking fails t when ix does not rank every query exactly as an
// index rebuilt from live (its live documents, in a shuffled order).
func sameRanking(t *testing.T, ix *Index, live map[string]Doc, r *rand.Rand) {
	t.Helper()
	docs := make([]Doc, 0, len(live))
	for _, d := range live {
		docs = append(docs, d)
	}
	slices.SortFunc(docs, func(a, b Doc) int { return cmp.Compare(a.Key, b.Key) })
	r.Shuffle(len(docs), func(i, j int) { docs[i], docs[j] = docs[j], docs[i] })
	fresh := New(docs)
	if ix.Len() != fresh.Len() || ix.total != fresh.total || len(ix.postings) != len(fresh.postings) {
		t.Fatalf("stats: %d docs, total %d, %d terms; rebuilt: %d, %d, %d", ix.Len(), ix.total, len(ix.postings), fresh.Len(), fresh.total, len(fresh.postings))
	}
	for _, q := range queries {
		for _, k := range []int{1, 3, 50} {
			got, want := rank(ix, q, k), rank(fresh, q, k)
			if !slices.Equal(got, want) {
				t.Fatalf("Search(%q, %d):\nincremental %v\nrebuilt     %v", q, k, got, want)
			}
		}
	}
}

// TestIncrementalRanksAsRebuilt: after each step of a table of changes
// (adds, removes, replacements, a slot reused, everything removed and
// added again) the index ranks every query exactly — same documents, same
// order, same scores — as one rebuilt from its documents.
func TestIncrementalRanksAsRebuilt(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pool := make([]Doc, 12)
	for i := range pool {
		pool[i] = genDoc(r, i)
	}
	weather := Doc{Key: "t1", Fields: []Field{{Text: "get_weather", Weight: 3}, {Text: "Current weather for a city."}}}
	type op struct {
		kind string // add, remove, replace
		doc  int    // index into pool (add, replace), or key number (remove)
		with *Doc   // replace with this instead of the pool's
	}
	steps := []struct {
		name string
		ops  []op
	}{
		{"add three", []op{{"add", 0, nil}, {"add", 1, nil}, {"add", 2, nil}}},
		{"remove the middle one", []op{{"remove", 1, nil}}},
		{"add into the freed slot", []op{{"add", 3, nil}}},
		{"replace a document's text", []op{{"replace", 0, &weather}}},
		{"add many", []op{{"add", 4, nil}, {"add", 5, nil}, {"add", 6, nil}, {"add", 7, nil}, {"add", 8, nil}}},
		{"remove the first and last", []op{{"remove", 0, nil}, {"remove", 8, nil}}},
		{"remove everything", []op{{"remove", 2, nil}, {"remove", 3, nil}, {"remove", 4, nil}, {"remove", 5, nil}, {"remove", 6, nil}, {"remove", 7, nil}}},
		{"add again", []op{{"add", 9, nil}, {"add", 10, nil}, {"add", 11, nil}, {"add", 0, nil}}},
	}
	ix := New(nil)
	ids := map[string]int{}
	live := map[string]Doc{}
	for _, st := range steps {
		for _, o := range st.ops {
			switch o.kind {
			case "add":
				d := pool[o.doc]
				ids[d.Key], live[d.Key] = ix.Add(d), d
			case "remove":
				key := fmt.Sprintf("t%d", o.doc)
				if !ix.Remove(ids[key]) {
					t.Fatalf("%s: remove %s: none", st.name, key)
				}
				delete(ids, key)
				delete(live, key)
			case "replace":
				d := *o.with
				key := pool[o.doc].Key
				d.Key = key
				if !ix.Replace(ids[key], d) {
					t.Fatalf("%s: replace %s: none", st.name, key)
				}
				live[key] = d
			}
		}
		t.Run(st.name, func(t *testing.T) { sameRanking(t, ix, live, r) })
	}
	if ix.Remove(-1) || ix.Remove(1000) || ix.Replace(1000, weather) {
		t.Error("a change of a document that is not there")
	}
	free := ids["t9"]
	ix.Remove(free)
	if ix.Remove(free) || ix.Replace(free, weather) {
		t.Error("a change of a removed document")
	}
	if len(rank(ix, "weather city", 10)) == 0 {
		t.Error("the replaced document is not found")
	}
}

// TestIncrementalRandomSequences is the property over random sequences:
// whatever adds, removes and replacements happen, the index ranks as a
// rebuilt one.
func TestIncrementalRandomSequences(t *testing.T) {
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 7))
		checkSequence(t, r, 200)
	}
}

// checkSequence applies n random changes, comparing with a rebuild now
// and then and at the end.
func checkSequence(t *testing.T, r *rand.Rand, n int) {
	t.Helper()
	ix := New(nil)
	ids := map[string]int{}
	live := map[string]Doc{}
	var keys []string
	next := 0
	for i := range n {
		switch op := r.IntN(10); {
		case op < 5 || len(keys) == 0: // add
			d := genDoc(r, next)
			next++
			ids[d.Key], live[d.Key] = ix.Add(d), d
			keys = append(keys, d.Key)
		case op < 8: // remove
			j := r.IntN(len(keys))
			key := keys[j]
			if !ix.Remove(ids[key]) {
				t.Fatalf("remove %s: none", key)
			}
			keys = slices.Delete(keys, j, j+1)
			delete(ids, key)
			delete(live, key)
		default: // replace
			key := keys[r.IntN(len(keys))]
			d := genDoc(r, 0)
			d.Key = key
			if !ix.Replace(ids[key], d) {
				t.Fatalf("replace %s: none", key)
			}
			live[key] = d
		}
		if i%50 == 49 {
			sameRanking(t, ix, live, r)
		}
	}
	sameRanking(t, ix, live, r)
}

// FuzzIncremental drives the sequence from the fuzzer's seeds.
func FuzzIncremental(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(40))
	f.Add(uint64(99), uint64(0), uint8(255))
	f.Fuzz(func(t *testing.T, a, b uint64, n uint8) {
		checkSequence(t, rand.New(rand.NewPCG(a, b)), int(n))
	})
}
