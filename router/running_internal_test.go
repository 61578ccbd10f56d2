package router

import (
	"testing"
	"time"
)

// A batch answered before its first notice costs the notices no
// allocation and no timer of its own: add links it and arms the router's
// one timer only when it is not armed for sooner, drop unlinks it; a drop
// in the middle, at the head or at the tail leaves the others linked; a
// stopped notices links nothing.
func TestNoticesAddDrop(t *testing.T) {
	n := newNotices(Notices{}, &fakeEvents{})
	var bs [3]batch
	now := time.Now()
	for i := range bs {
		bs[i].start = now
		n.add(&bs[i], "_INBOX.x")
	}
	timer := n.t
	linked := func() (k int) {
		for b := n.head; b != nil; b = b.note.next {
			k++
		}
		return k
	}
	for i, want := range []int{2, 1, 0} {
		n.drop(&bs[[]int{1, 2, 0}[i]])
		if got := linked(); got != want {
			t.Fatalf("after %d drops: %d linked, want %d", i+1, got, want)
		}
	}
	var b batch
	b.start = now
	if a := testing.AllocsPerRun(1000, func() { n.add(&b, "_INBOX.x"); n.drop(&b) }); a != 0 {
		t.Fatalf("%.1f allocations per batch", a)
	}
	if n.t != timer {
		t.Fatal("a new timer")
	}
	n.stop()
	n.add(&b, "_INBOX.x")
	if n.head != nil {
		t.Fatal("linked after stop")
	}
}
