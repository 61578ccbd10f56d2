// Package search ranks documents against a query of words with BM25: the
// index behind the search_tools meta tool (docs/protocol.md 4.2). It is pure
// and small: a document is a few weighted fields of text, an index is built
// once for a set of documents and read by any number of goroutines.
package search

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"unicode"
)

// BM25 parameters: the usual ones.
const (
	k1 = 1.2
	b  = 0.75
)

// Field is one piece of a document's text and how much a word in it counts.
type Field struct {
	Text   string
	Weight int // a word counts Weight times; zero means 1
}

// Doc is one searchable document.
type Doc struct {
	Fields []Field
}

type posting struct {
	doc int32
	tf  float32
}

// Index is an immutable BM25 index.
type Index struct {
	postings map[string][]posting
	lens     []float32
	avg      float64
}

// Hit is one document that matches, with its score.
type Hit struct {
	Doc   int // the document's position in the slice given to New
	Score float64
}

// New indexes docs.
func New(docs []Doc) *Index {
	ix := &Index{postings: map[string][]posting{}, lens: make([]float32, len(docs))}
	var total float64
	tf := map[string]float32{}
	for i, d := range docs {
		clear(tf)
		var n float32
		for _, f := range d.Fields {
			w := float32(max(f.Weight, 1))
			for _, t := range Tokens(f.Text) {
				tf[t] += w
				n += w
			}
		}
		for t, c := range tf {
			ix.postings[t] = append(ix.postings[t], posting{doc: int32(i), tf: c})
		}
		ix.lens[i] = n
		total += float64(n)
	}
	if len(docs) > 0 {
		ix.avg = total / float64(len(docs))
	}
	return ix
}

// Len is the number of documents.
func (ix *Index) Len() int { return len(ix.lens) }

// Search scores every document that holds a word of query and returns
// those keep accepts, best first (ties by position), at most k of them.
// keep nil accepts all.
func (ix *Index) Search(query string, k int, keep func(doc int) bool) []Hit {
	if k <= 0 {
		return nil
	}
	terms := Tokens(query)
	slices.Sort(terms)
	terms = slices.Compact(terms)
	scores := make([]float64, len(ix.lens)) // dense: a query's words reach many documents
	var touched []int32
	n := float64(len(ix.lens))
	for _, t := range terms {
		ps := ix.postings[t]
		if len(ps) == 0 {
			continue
		}
		idf := math.Log(1 + (n-float64(len(ps))+0.5)/(float64(len(ps))+0.5))
		for _, p := range ps {
			tf := float64(p.tf)
			norm := 1 - b + b*float64(ix.lens[p.doc])/ix.avg
			if scores[p.doc] == 0 {
				touched = append(touched, p.doc)
			}
			scores[p.doc] += idf * tf * (k1 + 1) / (tf + k1*norm)
		}
	}
	better := func(x, y Hit) int { return cmp.Or(cmp.Compare(y.Score, x.Score), cmp.Compare(x.Doc, y.Doc)) }
	hits := make([]Hit, 0, k+1) // the best k so far, best first
	for _, d := range touched {
		h := Hit{Doc: int(d), Score: scores[d]}
		if len(hits) == k && better(h, hits[k-1]) >= 0 || keep != nil && !keep(h.Doc) {
			continue
		}
		i, _ := slices.BinarySearchFunc(hits, h, better)
		hits = slices.Insert(hits, i, h)
		if len(hits) > k {
			hits = hits[:k]
		}
	}
	return hits
}

// Tokens splits text into lower-case words: at every character that is not
// a letter or digit, between a lower-case letter and an upper-case one
// (camelCase), so "mcp__github__createIssue" is mcp, github, create,
// issue. A trailing "s" of a word longer than three letters is dropped, so
// plurals match.
func Tokens(text string) []string {
	var out []string
	var cur []rune
	flush := func() {
		if len(cur) == 0 {
			return
		}
		w := strings.ToLower(string(cur))
		if len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") {
			w = w[:len(w)-1]
		}
		out = append(out, w)
		cur = cur[:0]
	}
	var prev rune
	for _, r := range text {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			flush()
		case unicode.IsUpper(r) && unicode.IsLower(prev):
			flush()
			cur = append(cur, r)
		default:
			cur = append(cur, r)
		}
		prev = r
	}
	flush()
	return out
}
