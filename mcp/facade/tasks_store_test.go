package facade

import (
	"encoding/json"
	"errors"
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

// TestTaskResultKey: a completed task's result is under its own key,
// written before the record says completed; no result is kept for a task
// that ended otherwise or is past its TTL, and a task dropped from its
// index (by a creation or a listing) takes its result along, also one a
// crash left beside a record still working. A record of the earlier
// layout, its result inline, still reads.
func TestTaskResultKey(t *testing.T) {
	e := newEnv(t)
	st, ctx := e.f.kv, t.Context()
	results := taskResults{st}
	const s, u = "mt-result", "alice"
	newTask := func(created time.Time, ttl int64) *taskRecord {
		t.Helper()
		r := &taskRecord{ID: newID(), Session: s, User: u, Tool: "hello", CallID: "mcp-" + newID()[:20],
			ReplyID: client.NewReplyID(), Status: mcp.TaskStatusWorking, Created: created, Updated: created, TTLMS: ttl}
		if err := st.createTask(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	complete := func(r *taskRecord) { r.Status = mcp.TaskStatusCompleted }
	result := func(text string) json.RawMessage {
		raw, _ := json.Marshal(mcp.NewToolResultText(text))
		return raw
	}
	stored := func(kind, id string) bool {
		kv, err := st.bucket(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = kv.Get(ctx, userKey(kind, s, u, id))
		return err == nil
	}
	readResult := func(r *taskRecord) string {
		t.Helper()
		out, rerr := (&taskFront{session: s, user: u, store: st}).result(ctx, r)
		if rerr != nil {
			t.Fatalf("result of %s: %+v", r.ID, rerr)
		}
		raw, _ := json.Marshal(out)
		text, _ := resultText(t, raw)
		return text
	}

	// Completed: the record holds no result, the result key does; a second
	// end (another process's) changes neither.
	a := newTask(time.Now(), 60000)
	if r, err := results.end(ctx, s, u, a.ID, result("first"), complete); err != nil || r.Status != mcp.TaskStatusCompleted {
		t.Fatalf("endTask: %+v %v", r, err)
	}
	if r, err := results.end(ctx, s, u, a.ID, result("second"), complete); err != nil || r.Status != mcp.TaskStatusCompleted {
		t.Fatalf("a second endTask: %+v %v", r, err)
	}
	var raw map[string]json.RawMessage
	if err := st.get(ctx, userKey("t", s, u, a.ID), &raw); err != nil || raw["result"] != nil {
		t.Fatalf("the completed record: %v %v", raw, err)
	}
	r, err := st.getTask(ctx, s, u, a.ID)
	if err != nil || r.Result != nil || readResult(r) != "first" {
		t.Fatalf("the completed task: %+v %v", r, err)
	}

	// Cancelled first, then the call's end: no result kept.
	b := newTask(time.Now(), 60000)
	if _, err := st.updateTask(ctx, s, u, b.ID, func(r *taskRecord) { r.Status = mcp.TaskStatusCancelled }); err != nil {
		t.Fatal(err)
	}
	if r, err := results.end(ctx, s, u, b.ID, result("late"), complete); err != nil || r.Status != mcp.TaskStatusCancelled || stored("o", b.ID) {
		t.Fatalf("the end of a cancelled task: %+v %v, result kept %v", r, err, stored("o", b.ID))
	}
	// Past its TTL: nothing written.
	c := newTask(time.Now().Add(-time.Minute), 1000)
	if _, err := results.end(ctx, s, u, c.ID, result("expired"), complete); !errors.Is(err, errNotFound) || stored("o", c.ID) {
		t.Fatalf("the end of an expired task: %v, result kept %v", err, stored("o", c.ID))
	}
	// Too large: failed, nothing kept.
	big := newTask(time.Now(), 60000)
	if r, err := results.end(ctx, s, u, big.ID, result(strings.Repeat("x", maxResult)), complete); err != nil ||
		r.Status != mcp.TaskStatusFailed || !strings.Contains(r.Error, "larger than a task record holds") || stored("o", big.ID) {
		t.Fatalf("a result too large: %+v %v", r, err)
	}

	// A crash between the writes: a result beside a record still working.
	d := newTask(time.Now(), 60000)
	if err := st.put(ctx, userKey("o", s, u, d.ID), json.RawMessage(result("orphan")), false); err != nil {
		t.Fatal(err)
	}
	if r, err := st.getTask(ctx, s, u, d.ID); err != nil || r.Status != mcp.TaskStatusWorking || results.load(ctx, r) != nil || r.Result != nil {
		t.Fatalf("a working task's result was read: %+v %v", r, err)
	}
	// A task dropped from the index goes with its result: a and d expire
	// (their index entries say so), one at a creation, one at a listing.
	expire := func(id string) {
		t.Helper()
		var idx taskIndex
		if err := st.get(ctx, userKey("i", s, u), &idx); err != nil {
			t.Fatal(err)
		}
		for i := range idx.Tasks {
			if idx.Tasks[i].ID == id {
				idx.Tasks[i].Expires = time.Now().Add(-time.Second)
			}
		}
		if err := st.put(ctx, userKey("i", s, u), &idx, false); err != nil {
			t.Fatal(err)
		}
	}
	expire(a.ID)
	newTask(time.Now(), 60000)
	expire(d.ID)
	if _, err := st.listTasks(ctx, s, u); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a.ID, d.ID} {
		if stored("t", id) || stored("o", id) {
			t.Fatalf("a dropped task's record %v, result %v", stored("t", id), stored("o", id))
		}
	}

	// The earlier layout: the result inline in the record.
	old := &taskRecord{ID: newID(), Session: s, User: u, Tool: "hello", Status: mcp.TaskStatusCompleted, Created: time.Now(),
		Updated: time.Now(), TTLMS: 60000, Result: result("inline")}
	if err := st.createTask(ctx, old); err != nil {
		t.Fatal(err)
	}
	if r, err := st.getTask(ctx, s, u, old.ID); err != nil || readResult(r) != "inline" {
		t.Fatalf("a record with its result inline: %+v %v", r, err)
	}
}
