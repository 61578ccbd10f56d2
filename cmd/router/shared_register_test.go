package main

import (
	"path/filepath"
	"testing"

	"github.com/toolbus/toolbus/security"
)

// TestSharedRegisterFollowsSpec: a router under --secure refuses the shared
// P.register of protocol 1.11 unless its directory's spec lets workers
// publish there (worker_shared_register, the upgrade window of 1.12), so
// credentials and router agree without a second flag.
func TestSharedRegisterFollowsSpec(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec *security.Spec // nil: no directory
		want bool
	}{
		{"no directory", nil, false},
		{"the default spec", &security.Spec{}, false},
		{"the upgrade window", &security.Spec{WorkerSharedRegister: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "secure")
			if tc.spec != nil {
				if _, err := security.Generate(dir, "nats://127.0.0.1:4222", *tc.spec); err != nil {
					t.Fatal(err)
				}
			}
			if got := sharedRegister(dir); got != tc.want {
				t.Fatalf("sharedRegister: %v, want %v", got, tc.want)
			}
		})
	}
}
