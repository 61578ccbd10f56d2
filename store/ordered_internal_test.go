package store

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// TestOrderedKeepsSortedListing holds the listing, moved one key at a time
// (session 35), to a sort of the cache by registration then key through
// random puts (an update may change a value's order), deletes, stale
// deliveries and values decoded away.
func TestOrderedKeepsSortedListing(t *testing.T) {
	type val struct {
		key   string
		order int64
	}
	o := NewOrdered[*val](nil, func(v *val) int64 { return v.order }, nil)
	rng := rand.New(rand.NewPCG(35, 1))
	var rev uint64
	for step := range 20000 {
		key := "k" + strconv.Itoa(rng.IntN(60))
		rev++
		at := rev - uint64(rng.IntN(3)) // now and then a stale delivery
		order := int64(rng.IntN(8))     // ties: listed by key
		switch n := rng.IntN(10); {
		case n < 6:
			o.Put(key, at, &val{key, order})
		case n < 8:
			_ = o.Apply(delEntry(key, at), nil)
		default:
			_ = o.Apply(putEntry(key, fmt.Sprint(order), at), func(b []byte) (*val, bool, error) {
				ord, _ := strconv.Atoi(string(b))
				return &val{key, int64(ord)}, ord%2 == 0, nil // an odd one is decoded away
			})
		}
		var want []*val
		for _, v := range o.cache.All() {
			want = append(want, v)
		}
		slices.SortFunc(want, func(a, b *val) int { return cmp.Or(cmp.Compare(a.order, b.order), cmp.Compare(a.key, b.key)) })
		if got := o.List(); !slices.Equal(got, want) || o.Len() != len(want) {
			t.Fatalf("step %d: listing %v, the sorted cache %v", step, got, want)
		}
	}
}
