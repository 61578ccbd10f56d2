package main

import (
	"strings"
	"testing"
)

// TestAttackSecurityConfigSharedPassword (session 30, second red team):
// `toolbus security config --worker a-b=x --worker a_b=y` named one
// password variable, TOOLBUS_WORKER_A_B_PASSWORD, for both logins, so each
// worker could log in as the other; it is refused. With --out each login
// has its own nkey, and the same names are kept.
func TestAttackSecurityConfigSharedPassword(t *testing.T) {
	out, _, err := exec(t.Context(), "security", "config", "--worker", "a-b=x", "--worker", "a_b=y")
	if err == nil || !strings.Contains(err.Error(), "TOOLBUS_WORKER_A_B_PASSWORD") || strings.Contains(out, "password") {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, _, err := exec(t.Context(), "security", "config", "--worker", "a-b=x", "--worker", "a_b=y", "--out", t.TempDir()+"/d"); err != nil || !strings.Contains(out, `nkey: "U`) {
		t.Fatalf("--out: %v\n%s", err, out)
	}
}
