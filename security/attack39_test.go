package security_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/security"
)

// TestAttackAgentsAddedAtOnce (session 39, red team): `toolbus security
// agent` read the directory's spec, added its session and wrote the whole
// configuration back, and `router --secure` (Refresh) did the same at its
// start, with nothing between the read and the write. An operator's
// script making sessions in parallel (or a router starting meanwhile) lost
// all but the last writer's sessions: each command reported its agent made
// and printed its seed, but the login was not in nats-server.conf (it
// could not log in) and, worse, the shared agent had no deny entries for
// it, so the session the operator meant to isolate was open to the shared
// agent. The read-modify-write now holds the directory's lock.
func TestAttackAgentsAddedAtOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	if _, err := security.Generate(dir, "nats://127.0.0.1:4222", security.Spec{}); err != nil {
		t.Fatal(err)
	}
	const n = 12
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := security.AddAgent(dir, fmt.Sprint("s", i), "u"+fmt.Sprint(i)); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if _, err := security.Refresh(dir); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	spec, err := security.LoadSpec(dir)
	if err != nil {
		t.Fatal(err)
	}
	users, err := security.Users(spec)
	if err != nil {
		t.Fatal(err)
	}
	conf, _ := os.ReadFile(filepath.Join(dir, security.ServerConfigFile))
	shared, _ := security.Lookup(users, security.RoleAgent)
	var lost []string
	for i := range n {
		s := fmt.Sprint("s", i)
		u, ok := security.Lookup(users, "session-"+s)
		seed, err := os.ReadFile(security.SeedFile(dir, "session-"+s))
		kp, kerr := nkeys.FromSeed(seed)
		if !ok || err != nil || kerr != nil || !slices.Contains(shared.Permissions.PublishDeny, "toolbus.call."+s) {
			lost = append(lost, s)
			continue
		}
		if pub, _ := kp.PublicKey(); !strings.Contains(string(conf), pub) || u.Name == "" {
			lost = append(lost, s+" (its seed's key not in nats-server.conf)")
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d sessions added at once lost or not isolated: %v", len(lost), n, lost)
	}
}
