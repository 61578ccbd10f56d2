// Package search is the BM25 index behind search_tools (docs/protocol.md
// 4.2), changed one document at a time. Its statistics are integers, so an
// incrementally changed index ranks exactly as a rebuilt one.
package search

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode"
)

// BM25 parameters: the usual ones.
const (
	k1 = 1.2
	b  = 0.75
)

// MaxWeight bounds a field's weight, keeping lengths small exact integers.
const MaxWeight = 100

// Field is one piece of a document's text and how much a word in it counts.
type Field struct {
	Text   string
	Weight int // a word counts Weight times; zero (or less) means 1, at most MaxWeight
}

// Doc is one searchable document.
type Doc struct {
	Fields []Field
	// Key breaks ties; unique keys make ranking independent of ids.
	Key string
}

type posting struct {
	doc int32
	tf  uint32 // the weighted count of the term in the document
}

// slot is one document of the index; a free one has live false.
type slot struct {
	live  bool
	len   int64    // the weighted count of all its terms
	key   string   // Doc.Key
	terms []string // its distinct terms: what Remove takes out
}

// Index is a BM25 index. Search may run concurrently with anything;
// Add, Remove and Replace wait for searches in progress.
type Index struct {
	mu       sync.RWMutex
	postings map[string][]posting
	docs     []slot
	free     []int32 // free slots, reused by Add
	live     int
	total    int64 // the sum of the live documents' lengths
}

// Hit is one document that matches, with its score.
type Hit struct {
	Doc   int // the document's id: its position in the slice given to New, or what Add returned
	Score float64
}

// New indexes docs; docs[i] gets id i.
func New(docs []Doc) *Index {
	ix := &Index{postings: map[string][]posting{}, docs: make([]slot, 0, len(docs))}
	tf := map[string]uint32{}
	for _, d := range docs {
		ix.insert(int32(len(ix.docs)), d, tf)
	}
	return ix
}

// Add indexes d and returns its id (a free id is reused).
func (ix *Index) Add(d Doc) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	id := int32(len(ix.docs))
	if n := len(ix.free); n > 0 {
		id, ix.free = ix.free[n-1], ix.free[:n-1]
	}
	ix.insert(id, d, map[string]uint32{})
	return int(id)
}

// Remove takes document id out; false when there is none.
func (ix *Index) Remove(id int) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if !ix.remove(id) {
		return false
	}
	ix.free = append(ix.free, int32(id))
	return true
}

// Replace indexes d as document id, in place of what it was; false (and
// nothing changes) when there is no document id.
func (ix *Index) Replace(id int, d Doc) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if !ix.remove(id) {
		return false
	}
	ix.insert(int32(id), d, map[string]uint32{})
	return true
}

// insert indexes d as id (a new or free slot), counting terms in tf.
func (ix *Index) insert(id int32, d Doc, tf map[string]uint32) {
	clear(tf)
	var n int64
	for _, f := range d.Fields {
		w := uint32(min(max(f.Weight, 1), MaxWeight))
		for _, t := range Tokens(f.Text) {
			tf[t] += w
			n += int64(w)
		}
	}
	sl := slot{live: true, len: n, key: d.Key, terms: make([]string, 0, len(tf))}
	for t, c := range tf {
		ix.postings[t] = append(ix.postings[t], posting{doc: id, tf: c})
		sl.terms = append(sl.terms, t)
	}
	if int(id) == len(ix.docs) {
		ix.docs = append(ix.docs, sl)
	} else {
		ix.docs[id] = sl
	}
	ix.live++
	ix.total += n
}

// remove takes document id's postings and length out, leaving its slot free.
func (ix *Index) remove(id int) bool {
	if id < 0 || id >= len(ix.docs) || !ix.docs[id].live {
		return false
	}
	sl := &ix.docs[id]
	for _, t := range sl.terms {
		ps := ix.postings[t]
		i := slices.IndexFunc(ps, func(p posting) bool { return p.doc == int32(id) })
		if i < 0 {
			continue // cannot happen: every term of a slot has its posting
		}
		// Postings' order does not matter: hits are sorted.
		ps[i] = ps[len(ps)-1]
		if ps = ps[:len(ps)-1]; len(ps) == 0 {
			delete(ix.postings, t)
		} else {
			ix.postings[t] = ps
		}
	}
	ix.live--
	ix.total -= sl.len
	*sl = slot{}
	return true
}

// Len is the number of documents.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.live
}

// Search returns at most k documents keep accepts (nil: all) best first;
// keep runs read-locked and must not change the index.
func (ix *Index) Search(query string, k int, keep func(doc int) bool) []Hit {
	if k <= 0 {
		return nil
	}
	terms := Tokens(query)
	slices.Sort(terms)
	terms = slices.Compact(terms)
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.live == 0 {
		return nil
	}
	scores := make([]float64, len(ix.docs)) // dense: a query's words reach many documents
	var touched []int32
	n := float64(ix.live)
	avg := float64(ix.total) / n
	for _, t := range terms {
		ps := ix.postings[t]
		if len(ps) == 0 {
			continue
		}
		idf := math.Log(1 + (n-float64(len(ps))+0.5)/(float64(len(ps))+0.5))
		for _, p := range ps {
			tf := float64(p.tf)
			norm := 1 - b + b*float64(ix.docs[p.doc].len)/avg
			if scores[p.doc] == 0 {
				touched = append(touched, p.doc)
			}
			scores[p.doc] += idf * tf * (k1 + 1) / (tf + k1*norm)
		}
	}
	better := func(x, y Hit) int {
		return cmp.Or(cmp.Compare(y.Score, x.Score), cmp.Compare(ix.docs[x.Doc].key, ix.docs[y.Doc].key), cmp.Compare(x.Doc, y.Doc))
	}
	hits := make([]Hit, 0, k+1) // the best k so far, best first
	for _, d := range touched {
		h := Hit{Doc: int(d), Score: scores[d]}
		if len(hits) == k && better(h, hits[k-1]) >= 0 || keep != nil && !keep(h.Doc) {
			continue
		}
		i, _ := slices.BinarySearchFunc(hits, h, better)
		hits = slices.Insert(hits, i, h)
		hits = hits[:min(len(hits), k)]
	}
	return hits
}

// Tokens splits text into lower-case words at non-alphanumerics and
// camelCase ("createIssue": create, issue), dropping a plural "s" after
// three letters.
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
