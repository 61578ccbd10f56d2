package search

import (
	"fmt"
	"slices"
	"testing"
)

func TestTokens(t *testing.T) {
	for in, want := range map[string][]string{
		"mcp__github__createIssue": {"mcp", "github", "create", "issue"},
		"get_weather":              {"get", "weather"},
		"Lists files, in a DIR.":   {"list", "file", "in", "a", "dir"},
		"address class":            {"address", "class"},
		"":                         nil,
		"Ünïcode wörds":            {"ünïcode", "wörd"},
	} {
		if got := Tokens(in); !slices.Equal(got, want) {
			t.Errorf("Tokens(%q) = %q, want %q", in, got, want)
		}
	}
}

func docs(texts ...string) []Doc {
	out := make([]Doc, len(texts))
	for i, s := range texts {
		out[i] = Doc{Fields: []Field{{Text: s}}}
	}
	return out
}

func TestRanking(t *testing.T) {
	ix := New([]Doc{
		{Fields: []Field{{Text: "get_weather", Weight: 3}, {Text: "Current weather for a city."}}},
		{Fields: []Field{{Text: "get_forecast", Weight: 3}, {Text: "Weather forecast for the next days in a city."}}},
		{Fields: []Field{{Text: "send_email", Weight: 3}, {Text: "Send an email to a person."}}},
		{Fields: []Field{{Text: "read_file", Weight: 3}, {Text: "Read a file."}, {Text: "path", Weight: 2}}},
	})
	for _, tc := range []struct {
		query string
		want  []int
	}{
		{"weather", []int{0, 1}},          // the name counts more than the description
		{"forecast weather", []int{1, 0}}, // both words beat one
		{"email", []int{2}},
		{"path", []int{3}},  // schema property names are searched
		{"files", []int{3}}, // plurals
		{"nothing matches", []int{}},
		{"", []int{}},
		{"a city", []int{0, 1}}, // "a" is everywhere and weighs little
	} {
		var got []int
		for _, h := range ix.Search(tc.query, 10, nil) {
			got = append(got, h.Doc)
		}
		if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			// "a city": docs 2, 3 hold "a" too, after the city docs
			if tc.query == "a city" && len(got) >= 2 && slices.Equal(got[:2], tc.want) {
				continue
			}
			t.Errorf("Search(%q) = %v, want %v", tc.query, got, tc.want)
		}
	}
	if hits := ix.Search("weather", 1, nil); len(hits) != 1 || hits[0].Doc != 0 {
		t.Errorf("k=1: %v", hits)
	}
	if hits := ix.Search("weather", 10, func(d int) bool { return d != 0 }); len(hits) != 1 || hits[0].Doc != 1 {
		t.Errorf("keep: %v", hits)
	}
}

func TestEmptyIndex(t *testing.T) {
	if hits := New(nil).Search("x", 5, nil); len(hits) != 0 {
		t.Fatal(hits)
	}
}

func FuzzTokens(f *testing.F) {
	f.Add("mcp__github__createIssue")
	f.Add("\xff\xfeA")
	f.Fuzz(func(t *testing.T, s string) {
		for _, w := range Tokens(s) {
			if w == "" {
				t.Fatal("empty token")
			}
		}
		New(docs(s)).Search(s, 3, nil)
	})
}

// docs10k are 10,000 tools like the registry's: go test -run - -bench 10k ./search/
func docs10k() []Doc {
	words := []string{"create", "read", "update", "delete", "list", "issue", "file", "user", "invoice", "weather", "ticket", "repo", "branch", "email", "calendar", "event", "order", "payment", "report", "chart"}
	var ds []Doc
	for i := range 10000 {
		name := fmt.Sprintf("mcp__srv%d__%s_%s_%d", i%40, words[i%20], words[(i/20)%20], i)
		desc := fmt.Sprintf("%s the %s of a %s, with %s and %s.", words[(i*7)%20], words[(i*3)%20], words[(i*11)%20], words[(i*13)%20], words[(i*17)%20])
		ds = append(ds, Doc{Key: name, Fields: []Field{{Text: name, Weight: 3}, {Text: desc}, {Text: "id name body", Weight: 2}}})
	}
	return ds
}

// BenchmarkSearch10k is one query over 10,000 tools.
func BenchmarkSearch10k(b *testing.B) {
	ix := New(docs10k())
	b.ResetTimer()
	for b.Loop() {
		ix.Search("create an invoice for a payment", 10, nil)
	}
}

// BenchmarkChange10k is one tool's definition changing in an index of
// 10,000 (Replace: its old postings out, its new ones in), and one tool
// removed and another added.
func BenchmarkChange10k(b *testing.B) {
	ds := docs10k()
	b.Run("replace", func(b *testing.B) {
		ix := New(ds)
		i := 0
		for b.Loop() {
			d := ds[i%len(ds)]
			d.Fields = append(slices.Clone(d.Fields), Field{Text: fmt.Sprintf("version %d", i)})
			ix.Replace(i%len(ds), d)
			i++
		}
	})
	b.Run("remove+add", func(b *testing.B) {
		ix := New(ds)
		i := 0
		for b.Loop() {
			ix.Remove(i % len(ds))
			ix.Add(ds[i%len(ds)])
			i++
		}
	})
}

func BenchmarkIndex10k(b *testing.B) {
	var ds []Doc
	for i := range 10000 {
		ds = append(ds, Doc{Fields: []Field{{Text: fmt.Sprintf("tool_%d_create_issue", i), Weight: 3}, {Text: "Create an issue in a repository with a title and body."}}})
	}
	for b.Loop() {
		New(ds)
	}
}
