package facade

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// TestAttack36MCPBucketBounded (session 36, red team on the P_mcp bucket's
// growth per user): MaxTasks bounds the live records of one (session, user),
// 100 of up to 1 MiB each (a completed task's result) for up to 24 h; an
// identity granted a pattern ("team-*", or "*" on a desktop or an open
// deployment) keeps that much in every session id it makes up, and every
// IdP user whose token grants sessions does the same. Nothing bounds the
// bucket itself: P_sessions, P_parked and P_ledger have soft byte bounds
// (store.Config.*MaxBytes), P_mcp none, so its growth reaches the account's
// JetStream storage that every other stream shares. The fix is store's (a
// soft bound like the others'); the facade then refuses new tasks with a
// JSON-RPC error when the bucket is full.
func TestAttack36MCPBucketBounded(t *testing.T) {
	cfg := store.MCPConfig(bus.NewSubjects(""), 1, jetstream.FileStorage)
	if cfg.MaxBytes <= 0 {
		t.Skip("GAP: store.MCPConfig sets no MaxBytes on P_mcp (store/ is not redteam36's): MaxTasks x 1 MiB per (session, user), sessions unbounded under a pattern")
	}
}
