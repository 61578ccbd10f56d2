package parked

import (
	"errors"
	"sync"

	"github.com/toolbus/toolbus/store"
)

// callKey and batchKey are the two kinds of P_parked key whose leases a
// router renews: an answered call (<session>.<replyid>.<callid>) and a
// continuation (<session>.<replyid>). Each has its own leaseSet, so
// nothing tells them apart by counting dots.
type (
	callKey  string
	batchKey string
)

// leaseSet is the set of keys whose lease this router renews.
type leaseSet[K ~string] struct {
	mu   sync.Mutex
	keys map[K]struct{}
}

func newLeaseSet[K ~string]() leaseSet[K] { return leaseSet[K]{keys: map[K]struct{}{}} }

func (l *leaseSet[K]) hold(k K) {
	l.mu.Lock()
	l.keys[k] = struct{}{}
	l.mu.Unlock()
}

func (l *leaseSet[K]) release(k K) {
	l.mu.Lock()
	delete(l.keys, k)
	l.mu.Unlock()
}

func (l *leaseSet[K]) holds(k K) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.keys[k]
	return ok
}

func (l *leaseSet[K]) held() []K {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]K, 0, len(l.keys))
	for k := range l.keys {
		out = append(out, k)
	}
	return out
}

// renew runs touch on every key held and lets go of those that moved on
// (errNotOwner, or gone); it returns the last other error.
func (l *leaseSet[K]) renew(touch func(key string) error) (failed error) {
	for _, key := range l.held() {
		switch err := touch(string(key)); {
		case err == nil:
		case errors.Is(err, errNotOwner), store.IsNotFound(err):
			l.release(key)
		default:
			failed = err
		}
	}
	return failed
}

var errNotOwner = errors.New("parked: not the owner")
