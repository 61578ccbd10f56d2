package facade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestAttack36MCPBucketBounded (session 36, red team on the P_mcp bucket's
// growth per user): MaxTasks bounds the live records of one (session, user),
// 100 of up to 1 MiB each (a completed task's result) for up to 24 h; an
// identity granted a pattern ("team-*", or "*" on a desktop or an open
// deployment) keeps that much in every session id it makes up, and every
// IdP user whose token grants sessions does the same. P_mcp now has a soft
// byte bound (Config.MaxBytes; store.Bound) below its stream's max_bytes
// (store.HardBytes): past it a new task or request state is refused, and
// the tasks held still end. On a 3-node cluster, the bucket R3 (where
// JetStream's discard-new check counts a replacement whole): tasks in
// sessions made up until one is refused, a request state refused, then
// every held task ends with a result of 256 KiB, more than the margin above
// the soft bound holds: each ends, completed while the stream takes its
// result, failed (its result in the session's events) after. Since
// bounds36b the crossing's keys (crossing.go) are judged too: a new MCP
// session's client record and a carried message are refused; a record
// held is still read.
func TestAttack36MCPBucketBounded(t *testing.T) {
	const soft = 64 << 10
	c := testkit.RunCluster(t)
	nc := testkit.ConnectURL(t, c.URL(1))
	js := testkit.JetStream(t, nc)
	st := &kvStore{nc: nc, subj: bus.NewSubjects(""), replicas: 3, maxTasks: DefaultMaxTasks, soft: soft, log: slog.New(slog.DiscardHandler)}
	ctx := t.Context()
	if _, err := st.bucket(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "KV_"+bus.NewSubjects("").Bucket(bus.BucketMCP))
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.MaxBytes != store.HardBytes(soft) || cfg.Discard != jetstream.DiscardNew || cfg.Replicas != 3 {
		t.Fatalf("max_bytes %d, discard %v, replicas %d", cfg.MaxBytes, cfg.Discard, cfg.Replicas)
	}
	// An MCP session of a 2025-11-25 client recorded before the bound is reached.
	x := &crossing{nc: nc, store: st, session: "team-a", user: "mallory", policy: ConfirmHostUser, log: slog.New(slog.DiscardHandler)}
	x.remember(initialized(ctx, "mcp-a"), &mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2025-11-25"}})
	var rec clientRecord
	if err := st.get(ctx, x.crossKey("m", "mcp-a"), &rec); err != nil || rec.Version != "2025-11-25" {
		t.Fatalf("the record below the bound: %+v %v", rec, err)
	}
	var held []*taskRecord
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("no task refused")
		}
		now := time.Now()
		r := &taskRecord{ID: newID(), Session: fmt.Sprintf("team-%d", i), User: "mallory", Tool: "hello", CallID: "mcp-" + newID()[:20],
			ReplyID: "r" + newID()[:20], Status: mcp.TaskStatusWorking, Created: now, Updated: now, TTLMS: 3600_000}
		err := st.createTask(ctx, r)
		if err == nil {
			held = append(held, r)
			continue
		}
		if !errors.Is(err, errNoRoom) || !strings.Contains(err.Error(), "no new task or request state can be kept now") {
			t.Fatalf("task %d: %v", i, err)
		}
		if got, err := st.getTask(ctx, r.Session, r.User, r.ID); !errors.Is(err, errNotFound) {
			t.Fatalf("the refused task is stored: %+v %v", got, err)
		}
		if ts, err := st.listTasks(ctx, r.Session, r.User); err != nil || len(ts) != 0 {
			t.Fatalf("the refused task is counted: %d %v", len(ts), err)
		}
		break
	}
	if len(held) < 10 {
		t.Fatalf("%d tasks before the bound", len(held))
	}
	// A refused task leaves up to one task's bytes of room, and how much
	// depends on when the bound last read the bucket's bytes (their
	// overhead): fill it with the smallest new key the checks below make, a
	// client record of a session id as long as theirs, so that none of
	// theirs fits whatever the reads' timing (under load a new MCP
	// session's record fitted in what a task left).
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("no client record refused")
		}
		sid := fmt.Sprintf("f%04d", i) // as long as "mcp-b"
		x.remember(initialized(ctx, sid), &mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2025-11-25"}})
		if err := st.get(ctx, x.crossKey("m", sid), &rec); errors.Is(err, errNotFound) {
			break
		}
	}
	if err := st.putState(ctx, newID(), &stateRecord{Session: "team-x", User: "mallory", Expires: time.Now().Add(time.Hour)}); !errors.Is(err, errNoRoom) {
		t.Fatalf("a new request state at the bound: %v", err)
	}
	// A new MCP session's client record and a carried message (64 KiB at
	// most, a new key each) are refused too; the session held is still
	// read (adopt), and its messages are as new as any: refused.
	x.remember(initialized(ctx, "mcp-b"), &mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2025-11-25"}})
	if err := st.get(ctx, x.crossKey("m", "mcp-b"), &rec); !errors.Is(err, errNotFound) {
		t.Fatalf("a new MCP session's record at the bound: %v", err)
	}
	answer := []byte(`{"jsonrpc":"2.0","id":"p.1","result":{"action":"accept"}}`)
	for _, sid := range []string{"mcp-a", "mcp-b"} {
		if err := x.carry(ctx, sid, "2025-11-25", answer); !errors.Is(err, errNoRoom) {
			t.Fatalf("a message of %s carried at the bound: %v", sid, err)
		}
	}
	rec = clientRecord{}
	if err := st.get(ctx, x.crossKey("m", "mcp-a"), &rec); err != nil || rec.Version != "2025-11-25" {
		t.Fatalf("the record held: %+v %v", rec, err)
	}
	result, _ := json.Marshal(mcp.NewToolResultText(strings.Repeat("x", 256<<10)))
	var completed, failed int
	for i, r := range held {
		got, err := (taskResults{st}).end(ctx, r.Session, r.User, r.ID, result, func(r *taskRecord) { r.Status = mcp.TaskStatusCompleted })
		if err != nil {
			t.Fatalf("ending held task %d of %d: %v", i, len(held), err)
		}
		switch {
		case got.Status == mcp.TaskStatusCompleted:
			completed++
		case got.Status == mcp.TaskStatusFailed && strings.Contains(got.Error, "the result could not be kept: the bucket of MCP tasks is full"):
			failed++
		default:
			t.Fatalf("held task %d: %s %q", i, got.Status, got.Error)
		}
	}
	if completed == 0 || failed == 0 {
		t.Fatalf("%d completed, %d failed of %d", completed, failed, len(held))
	}
	t.Logf("%d tasks held at a soft bound of %d bytes; %d ended completed, %d failed when the stream was full", len(held), soft, completed, failed)
}

// initialized is ctx within MCP session sid, as the initialize hook sees it.
func initialized(ctx context.Context, sid string) context.Context {
	return server.NewMCPServer("t", "1").WithContext(ctx, mcpSession(sid))
}

type mcpSession string

func (mcpSession) Initialize()                                         {}
func (mcpSession) Initialized() bool                                   { return true }
func (mcpSession) NotificationChannel() chan<- mcp.JSONRPCNotification { return nil }
func (s mcpSession) SessionID() string                                 { return string(s) }
