package slab

import (
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Every carved string keeps the bytes its fill wrote, however many are
// carved after it, from one Carver and from a Pool under concurrent use.
func TestCarvedStringsStay(t *testing.T) {
	var c Carver
	var got, want []string
	for i := range 5000 {
		w := strings.Repeat(strconv.Itoa(i), 1+i%7)
		want = append(want, w)
		got = append(got, c.Make(len(w), func(b []byte) []byte { return append(b, w...) }))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("string %d is %q, want %q", i, got[i], want[i])
		}
	}

	var p Pool
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []string
			for i := range 2000 {
				mine = append(mine, p.Make(24, func(b []byte) []byte {
					return strconv.AppendInt(append(b, 'g', byte('0'+g), '.'), int64(i), 10)
				}))
			}
			for i, s := range mine {
				if w := "g" + strconv.Itoa(g) + "." + strconv.Itoa(i); s != w {
					errs <- s + " != " + w
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// A fill that writes more than max, a long string and an empty one are
// served too (the first two from arrays of their own).
func TestCarveEdges(t *testing.T) {
	var c Carver
	long := strings.Repeat("x", BlockSize)
	if s := c.Make(len(long), func(b []byte) []byte { return append(b, long...) }); s != long {
		t.Errorf("long string: %q", s)
	}
	if s := c.Make(4, func(b []byte) []byte { return append(b, "more than four"...) }); s != "more than four" {
		t.Errorf("outgrown: %q", s)
	}
	after := c.Make(4, func(b []byte) []byte { return append(b, "abcd"...) })
	if s := c.Make(4, func(b []byte) []byte { return b }); s != "" {
		t.Errorf("empty: %q", s)
	}
	if after != "abcd" {
		t.Errorf("after an outgrown fill: %q", after)
	}
}

// A carve takes an allocation per block, not per string.
func TestCarveAllocations(t *testing.T) {
	var c Carver
	got := testing.AllocsPerRun(10000, func() {
		c.Make(22, func(b []byte) []byte { return append(b, "0123456789abcdefghijkl"...) })
	})
	if got > 0 {
		t.Errorf("%.2f allocations per string, want 1 per %d strings", got, BlockSize/22)
	}
}
