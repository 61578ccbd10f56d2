// Package slab carves short per-message strings out of shared blocks, one
// allocation per block. A string's bytes are written once before it exists;
// it keeps its whole block alive, so long-kept ones should be cloned.
package slab

import (
	"sync"
	"unsafe"
)

// BlockSize is the size of a block; strings longer than BlockSize/4 get an
// allocation of their own.
const BlockSize = 512

// Carver carves from one block at a time: its zero value is ready. It is
// not safe for concurrent use: keep one per P (in a sync.Pool, as Pool does).
type Carver struct {
	free []byte // the block's tail, not carved yet: len == cap
}

// Make returns the string fill appends to an empty slice whose capacity
// is max: fill must append at most max bytes (more get a new array, which
// is then the string's own) and keep nothing of the slice.
func (c *Carver) Make(max int, fill func([]byte) []byte) string {
	if max > BlockSize/4 {
		b := fill(make([]byte, 0, max))
		return unsafe.String(unsafe.SliceData(b), len(b))
	}
	if len(c.free) < max {
		c.free = make([]byte, BlockSize)
	}
	b := fill(c.free[:0:max])
	if len(b) == 0 {
		return ""
	}
	if unsafe.SliceData(b) == unsafe.SliceData(c.free) {
		c.free = c.free[len(b):] // else fill outgrew max: b is an array of its own
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// Pool hands out Carvers, one per P as sync.Pool keeps them.
type Pool struct{ p sync.Pool }

// Get returns a Carver for the calling goroutine's use until Put.
func (p *Pool) Get() *Carver {
	if c, ok := p.p.Get().(*Carver); ok {
		return c
	}
	return new(Carver)
}

// Put gives c back; the caller must not use it any more.
func (p *Pool) Put(c *Carver) { p.p.Put(c) }

// Make is a Carver's Make from p.
func (p *Pool) Make(max int, fill func([]byte) []byte) string {
	c := p.Get()
	s := c.Make(max, fill)
	p.Put(c)
	return s
}
