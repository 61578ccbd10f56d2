//go:build unix

package main

import (
	"strings"
	"testing"
)

// TestLockStore: a second router on the same store is refused with a
// message that says why, and the store is free again once the first lets go.
func TestLockStore(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockStore(dir); err == nil || !strings.Contains(err.Error(), "is in use by another router") {
		t.Fatalf("second lock: %v", err)
	}
	unlock()
	again, err := lockStore(dir)
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	again()
}
