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

// TestSecondRouterAdvice: a router started where one already runs (its
// store locked) is told to join the running one's server with --nats,
// which works, rather than only to pick another --data, which then fails
// on the port.
func TestSecondRouterAdvice(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	var out strings.Builder
	err = run(t.Context(), []string{"--listen", "127.0.0.1:14999", "--data", dir}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "--nats nats://127.0.0.1:14999") {
		t.Fatalf("second router: %v", err)
	}
}
