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
	unlock, err := lockStore(dir, "127.0.0.1:4222")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockStore(dir, "127.0.0.1:4222"); err == nil || !strings.Contains(err.Error(), "is in use by another router") {
		t.Fatalf("second lock: %v", err)
	}
	unlock()
	again, err := lockStore(dir, "127.0.0.1:4222")
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	again()
}

// TestSecondRouterAdvice: a router started where one already runs (its
// store locked) is told to join the running one's server with --nats,
// which works, rather than only to pick another --data, which then fails
// on the port; the address is the running one's, not its own --listen
// (session 31: with the same --data and another --listen it named its
// own). A lock file without an address (an older router's) gets a
// placeholder, and one with anything else is not echoed.
func TestSecondRouterAdvice(t *testing.T) {
	for _, tc := range []struct{ holder, want string }{
		{"127.0.0.1:14998", "--nats nats://127.0.0.1:14998;"},
		{"", "--nats nats://<the other's --listen>;"},
		{"x\n--nats evil", "--nats nats://<the other's --listen>;"},
	} {
		dir := t.TempDir()
		unlock, err := lockStore(dir, tc.holder)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		err = run(t.Context(), []string{"--listen", "127.0.0.1:14999", "--data", dir}, &out, &out)
		unlock()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "14999") {
			t.Errorf("second router beside %q: %v", tc.holder, err)
		}
	}
}
