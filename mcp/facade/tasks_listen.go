package facade

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// Task status notifications at 2026-07-28 (the Tasks extension): a
// client sends subscriptions/listen with params.notifications.taskIds;
// the server acknowledges the ids it agreed to, then sends
// notifications/tasks on that request's stream whenever one changes.
// mcp-go v1.2.1 drops taskIds, so a listen naming task ids is the
// facade's, whole, on both transports (its acknowledgement names only the
// task ids; other kinds take another listen, which mcp-go serves), and
// the changes come from the records' KV subjects, so any facade process
// serves it.

const (
	methodSubscriptionsListen = string(mcp.MethodSubscriptionsListen)
	methodTaskNotification    = "notifications/tasks"
	tasksExtension            = "io.modelcontextprotocol/tasks"
	codeMissingCapability     = -32021 // Missing Required Client Capability
	// maxListens bounds the listen streams of tasks one facade process
	// serves at once; listenReread is how often a stream reads its live
	// tasks again (a write the subscription dropped, a replica behind).
	maxListens   = 1000
	listenReread = time.Second
	// maxListenIDs bounds the task ids one listen agrees to (the default
	// MaxTasks: every live task of a (session, user)).
	maxListenIDs = DefaultMaxTasks
)

// missingTasksCapability is the data of a -32021 error.
var missingTasksCapability = map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}}}

// listenParams are what the facade reads of a subscriptions/listen.
type listenParams struct {
	Notifications struct {
		TaskIDs []string `json:"taskIds"`
	} `json:"notifications"`
	Meta map[string]json.RawMessage `json:"_meta"`
}

// listensForTasks reports whether a subscriptions/listen names task ids.
func listensForTasks(params json.RawMessage) bool {
	var p listenParams
	return json.Unmarshal(params, &p) == nil && len(p.Notifications.TaskIDs) > 0
}

func (p *listenParams) declaresTasks() bool {
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if json.Unmarshal(p.Meta[mcp.MetaKeyClientCapabilities], &caps) != nil {
		return false
	}
	_, ok := caps.Extensions[tasksExtension]
	return ok
}

// streamKey carries, in a request's context, how a message is written on
// the request's own stream (SSE events, or the stdio output).
type streamKey struct{}

func withStream(ctx context.Context, send func([]byte) error) context.Context {
	return context.WithValue(ctx, streamKey{}, send)
}

func streamOf(ctx context.Context) func([]byte) error {
	send, _ := ctx.Value(streamKey{}).(func([]byte) error)
	return send
}

// serveStream answers m over HTTP as a stream of server-sent events: the
// messages answer sends on the stream, then its response.
func serveStream(ctx context.Context, w http.ResponseWriter, m *rpcMessage, answer func(context.Context, *rpcMessage) []byte) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	var mu sync.Mutex
	send := func(msg []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if _, err := fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg); err != nil {
			return err
		}
		if fl != nil {
			fl.Flush()
		}
		return nil
	}
	_ = send(answer(withStream(ctx, send), m))
}

// listen serves a subscriptions/listen naming task ids: it acknowledges
// the ids that are tasks of this session and user (any other is left
// out), sends each one's state at once and on every change, and ends when
// all of them ended, the request ends or the facade closes.
func (s *taskFront) listen(ctx context.Context, m *rpcMessage) (any, *rpcError) {
	var p listenParams
	if err := json.Unmarshal(m.Params, &p); err != nil {
		return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: err.Error()}
	}
	if !p.declaresTasks() {
		return nil, &rpcError{Code: codeMissingCapability, Message: "Missing required client capability: task notifications need the " + tasksExtension + " extension",
			Data: missingTasksCapability}
	}
	send := streamOf(ctx)
	if send == nil {
		return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: "subscriptions/listen: no stream to send on"}
	}
	if !s.runners.startListen() {
		return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: fmt.Sprintf("this facade process serves %d task subscriptions already (the most)", maxListens)}
	}
	defer s.runners.endListen()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	context.AfterFunc(s.runners.closing, stop)
	changes, err := s.store.watchChanges(ctx, s.session, s.user) // before the reads: no write is missed
	if err != nil {
		return nil, storeError(err)
	}
	meta := map[string]any{mcp.MetaKeySubscriptionID: m.ID}
	notify := func(r *taskRecord) {
		v := r.detailed(true)
		v.Meta = meta
		msg, _ := json.Marshal(map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "method": methodTaskNotification, "params": v})
		_ = send(msg)
	}
	seen := map[string]*taskRecord{}
	agreed := []string{}
	for _, id := range p.Notifications.TaskIDs {
		if _, dup := seen[id]; dup || len(agreed) == maxListenIDs {
			continue
		}
		r, err := s.store.getTask(ctx, s.session, s.user, id)
		if err != nil {
			continue // not this session's and user's task (or gone): not agreed
		}
		seen[id] = r
		agreed = append(agreed, id)
	}
	ack, _ := json.Marshal(map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "method": mcp.MethodNotificationSubscriptionsAcknowledged,
		"params": map[string]any{"notifications": map[string]any{"taskIds": agreed}, "_meta": meta}})
	if send(ack) != nil {
		return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: "subscriptions/listen: the stream is closed"}
	}
	for _, id := range agreed {
		r := seen[id]
		notify(r)
		if !r.Status.IsTerminal() {
			s.runners.follow(r) // a task nobody runs any more learns its end from the bus
		}
	}
	live := func() []string {
		var ids []string
		for _, id := range agreed {
			if last := seen[id]; last != nil && !last.Status.IsTerminal() {
				ids = append(ids, id)
			}
		}
		return ids
	}
	if len(live()) > 0 {
		// What a live task's record holds now is sent when it is news.
		s.store.follow(ctx, s.session, s.user, changes, live, func(id string, r *taskRecord) bool {
			switch last := seen[id]; {
			case last == nil || last.Status.IsTerminal(): // not agreed, or said all already
			case r == nil: // deleted: nothing more to say
				seen[id] = nil
			case r.Status != last.Status || !r.Updated.Equal(last.Updated):
				seen[id] = r
				notify(r)
			}
			return len(live()) > 0
		})
	}
	return map[string]any{"_meta": meta}, nil
}

func (t *taskRunners) startListen() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.listens >= maxListens {
		return false
	}
	t.listens++
	return true
}

func (t *taskRunners) endListen() {
	t.mu.Lock()
	t.listens--
	t.mu.Unlock()
}
