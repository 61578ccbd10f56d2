package facade

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/client"
)

// TestTaskRefusedWrite: a write of a task record that the stream refuses
// (a compare-and-set that lost) still reaches the subscription the facade
// watches records on, as every write reaches it before the stream stores
// it; tasks/result and subscriptions/listen (kvStore.follow) take the
// record as stored, never the write's message. Taking the message made
// TestTaskFollowsBusTask fail under load: tasks/result on B returned the
// result before A could read it.
func TestTaskRefusedWrite(t *testing.T) {
	e := newEnv(t)
	st, ctx := e.f.kv, t.Context()
	now := time.Now()
	r := &taskRecord{ID: newID(), Session: "mt-refused", User: "alice", Tool: "hello", CallID: "mcp-" + newID()[:20],
		ReplyID: client.NewReplyID(), Status: mcp.TaskStatusWorking, Created: now, Updated: now, TTLMS: 60000}
	if err := st.createTask(ctx, r); err != nil {
		t.Fatal(err)
	}
	changes, err := st.watchChanges(ctx, r.Session, r.User)
	if err != nil {
		t.Fatal(err)
	}
	// A completed record written as if the record were at a revision it is
	// not: the stream refuses it, the subscription gets it.
	forged := *r
	forged.Status, forged.Result = mcp.TaskStatusCompleted, json.RawMessage(`{"content":[{"type":"text","text":"forged"}]}`)
	subject, err := st.subject(ctx, userKey("t", r.Session, r.User, r.ID))
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(subject)
	m.Data, _ = json.Marshal(&forged)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "999999")
	if ack, err := st.nc.RequestMsgWithContext(ctx, m); err != nil || !strings.Contains(string(ack.Data), `"error"`) {
		t.Fatalf("the stream took the forged write: %v %+v", err, ack)
	}
	if _, err := st.updateTask(ctx, r.Session, r.User, r.ID, func(r *taskRecord) {
		r.Status, r.Message = mcp.TaskStatusCancelled, "Task cancelled by request"
	}); err != nil {
		t.Fatal(err)
	}
	// Both writes wait on the subscription, the refused one first.
	var got []mcp.TaskStatus
	st.follow(ctx, r.Session, r.User, changes, func() []string { return []string{r.ID} }, func(_ string, c *taskRecord) bool {
		got = append(got, c.Status)
		return !c.Status.IsTerminal()
	})
	if !slices.Equal(got, []mcp.TaskStatus{mcp.TaskStatusCancelled}) {
		t.Fatalf("follow saw %v, want the stored [cancelled]", got)
	}
	if w, err := st.watchTask(ctx, r.Session, r.User, r.ID); err != nil || w.Status != mcp.TaskStatusCancelled {
		t.Fatalf("watchTask: %+v %v", w, err)
	}
}
