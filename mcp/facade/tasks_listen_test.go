package facade

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/testkit"
)

// listenMsg is one message of a subscriptions/listen stream, as a client
// written from the Tasks extension's text reads it.
type listenMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Meta          map[string]json.RawMessage `json:"_meta"`
		Notifications struct {
			TaskIDs []string `json:"taskIds"`
		} `json:"notifications"`
		TaskID        string          `json:"taskId"`
		Status        string          `json:"status"`
		StatusMessage string          `json:"statusMessage"`
		Result        json.RawMessage `json:"result"`
	} `json:"params"`
	Result *struct {
		ResultType string                     `json:"resultType"`
		Meta       map[string]json.RawMessage `json:"_meta"`
	} `json:"result"`
	Error *struct {
		Code int `json:"code"`
		Data struct {
			RequiredCapabilities struct {
				Extensions map[string]json.RawMessage `json:"extensions"`
			} `json:"requiredCapabilities"`
		} `json:"data"`
	} `json:"error"`
}

// listenBody is a 2026-07-28 subscriptions/listen request naming ids,
// declaring the Tasks extension when declare.
func listenBody(ids []string, declare bool) []byte {
	caps := map[string]any{}
	if declare {
		caps["extensions"] = map[string]any{tasksExtension: map[string]any{}}
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": map[string]any{
		"notifications": map[string]any{"taskIds": ids},
		"_meta": map[string]any{mcp.MetaKeyProtocolVersion: mcp.ProtocolVersion20260728,
			mcp.MetaKeyClientInfo: map[string]any{"name": "raw", "version": "1"}, mcp.MetaKeyClientCapabilities: caps}}})
	return body
}

// listen posts a subscriptions/listen to backend as user in session s and
// returns the stream's messages (closed when the stream ends).
func (p *pair) listen(t *testing.T, backend, s, user string, ids []string, declare bool) <-chan listenMsg {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, p.url+"/mcp/"+s, bytes.NewReader(listenBody(ids, declare)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Toolbus-User", user)
	req.Header.Set("X-Test-Backend", backend)
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20260728)
	req.Header.Set(mcp.HeaderMethod, "subscriptions/listen")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("subscriptions/listen: HTTP %d %s %s", resp.StatusCode, ct, raw)
	}
	return readMessages(t, resp.Body, "data: ")
}

// readMessages decodes the lines of r that start with prefix.
func readMessages(t *testing.T, r io.ReadCloser, prefix string) <-chan listenMsg {
	out := make(chan listenMsg, 64)
	go func() {
		defer close(out)
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), prefix)
			if !ok {
				continue
			}
			var m listenMsg
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Errorf("stream message %s: %v", line, err)
				return
			}
			out <- m
		}
	}()
	return out
}

func nextMsg(t *testing.T, msgs <-chan listenMsg) listenMsg {
	t.Helper()
	return testkit.Recv(t, msgs, bound, "a message on the listen stream")
}

// untilStatus reads notifications/tasks of id until one has status.
func untilStatus(t *testing.T, msgs <-chan listenMsg, id, status string) listenMsg {
	t.Helper()
	for {
		m := nextMsg(t, msgs)
		if m.Method != methodTaskNotification || m.Params.TaskID != id {
			t.Fatalf("not a notification of %s: %+v", id, m)
		}
		if string(m.Params.Meta[mcp.MetaKeySubscriptionID]) != "7" {
			t.Fatalf("notification without the subscription id: %+v", m.Params.Meta)
		}
		if m.Params.Status == status {
			return m
		}
	}
}

// TestTaskListen: notifications/tasks on a 2026-07-28 subscriptions/listen
// naming task ids (a client written from the Tasks extension's text, on
// the facade process that does not run the task): the acknowledgement
// names only this user's tasks of the session, each task's state comes at
// once and on every change, the completed task with its result inline,
// and the stream ends once every task named ended; a client that does not
// declare the extension gets -32021; over stdio the same stream.
func TestTaskListen(t *testing.T) {
	p := newPair(t, false)
	release, stopped := make(chan struct{}), make(chan string, 1)
	bgWorker(t, p, release, stopped)
	const s = "mt-listen"
	id := p.startTask(t, "A", s, "bg_done")
	bobs := p.startTaskTTL(t, "A", s, "bob", "bg_stop", 60000)

	msgs := p.listen(t, "B", s, "alice", []string{id, bobs, id, strings.Repeat("f", 32)}, true)
	ack := nextMsg(t, msgs)
	if ack.Method != "notifications/subscriptions/acknowledged" || !slices.Equal(ack.Params.Notifications.TaskIDs, []string{id}) ||
		string(ack.Params.Meta[mcp.MetaKeySubscriptionID]) != "7" {
		t.Fatalf("acknowledgement: %+v", ack)
	}
	untilStatus(t, msgs, id, string(mcp.TaskStatusWorking))
	busTaskOf(t, p, s, id)
	releaseOne(t, release)
	done := untilStatus(t, msgs, id, string(mcp.TaskStatusCompleted))
	if text, isErr := resultText(t, done.Params.Result); isErr || text != "bg done" {
		t.Fatalf("completed notification's result: %s", done.Params.Result)
	}
	end := nextMsg(t, msgs)
	if string(end.ID) != "7" || end.Result == nil || end.Result.ResultType != "complete" || string(end.Result.Meta[mcp.MetaKeySubscriptionID]) != "7" {
		t.Fatalf("the listen's response: %+v", end)
	}
	if m, open := <-msgs; open {
		t.Fatalf("the stream goes on after its response: %+v", m)
	}
	if _, rerr := p.rpc(t, "A", s, "bob", "tasks/cancel", map[string]any{"taskId": bobs}, false); rerr != nil {
		t.Fatalf("bob's task: %+v", rerr)
	}

	refused := nextMsg(t, p.listen(t, "A", s, "alice", []string{id}, false))
	if refused.Error == nil || refused.Error.Code != codeMissingCapability || refused.Error.Data.RequiredCapabilities.Extensions[tasksExtension] == nil {
		t.Fatalf("without the extension: %+v", refused)
	}

	// Over stdio (toolbus mcp): the ended task's state, then the response.
	hostIn, facadeOut := io.Pipe()
	facadeIn, hostOut := io.Pipe()
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- p.backend[1].ServeStdio(ctx, s, "alice", facadeIn, facadeOut) }()
	t.Cleanup(func() { stop(); _ = hostOut.Close(); _ = facadeOut.Close(); <-served })
	lines := readMessages(t, hostIn, "")
	if _, err := hostOut.Write(append(listenBody([]string{id}, true), '\n')); err != nil {
		t.Fatal(err)
	}
	if ack := nextMsg(t, lines); !slices.Equal(ack.Params.Notifications.TaskIDs, []string{id}) {
		t.Fatalf("stdio acknowledgement: %+v", ack)
	}
	untilStatus(t, lines, id, string(mcp.TaskStatusCompleted))
	if end := nextMsg(t, lines); end.Result == nil || end.Result.ResultType != "complete" {
		t.Fatalf("stdio response: %+v", end)
	}
}

// TestListenBoundUnit: a facade process serves at most maxListens listen
// streams of tasks at once; one that ends frees its place.
func TestListenBoundUnit(t *testing.T) {
	e := newEnv(t)
	r := &taskRunners{closing: t.Context(), listens: make(chan struct{}, maxListens)}
	front := &taskFront{session: "s1", user: "alice", store: e.f.kv, runners: r}
	ctx := withStream(t.Context(), func([]byte) error { return nil })
	m := &rpcMessage{ID: json.RawMessage(`1`), Params: json.RawMessage(`{"notifications":{"taskIds":["` + newID() + `"]},` +
		`"_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`)}
	for range maxListens - 1 {
		r.listens <- struct{}{}
	}
	if _, rerr := front.listen(ctx, m); rerr != nil || len(r.listens) != maxListens-1 {
		t.Fatalf("the last place: %+v, %d places taken after it ended", rerr, len(r.listens))
	}
	r.listens <- struct{}{}
	if _, rerr := front.listen(ctx, m); rerr == nil || !strings.Contains(rerr.Message, "task subscriptions already") || len(r.listens) != maxListens {
		t.Fatalf("past the bound: %+v, %d places taken", rerr, len(r.listens))
	}
	<-r.listens
	if _, rerr := front.listen(ctx, m); rerr != nil {
		t.Fatalf("a place freed is not taken again: %+v", rerr)
	}
	if listensForTasks([]byte(`{"notifications":{"toolsListChanged":true}}`)) || !listensForTasks([]byte(`{"notifications":{"taskIds":["a"]}}`)) ||
		listensForTasks([]byte(`not json`)) {
		t.Fatal("listensForTasks")
	}
}

// TestDeclaresTasksUnit: the extension counts only where the Tasks
// extension's text puts it (per-request capabilities' extensions).
func TestDeclaresTasksUnit(t *testing.T) {
	for _, c := range []struct {
		meta string
		want bool
	}{
		{`{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`, true},
		{`{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/other":{}}}}`, false},
		{`{"io.modelcontextprotocol/clientCapabilities":{"tasks":{}}}`, false},
		{`{"io.modelcontextprotocol/clientCapabilities":"tasks"}`, false},
		{`{}`, false},
	} {
		var p listenParams
		if err := json.Unmarshal([]byte(`{"notifications":{"taskIds":["a"]},"_meta":`+c.meta+`}`), &p); err != nil {
			t.Fatal(err)
		}
		if got := p.declaresTasks(); got != c.want {
			t.Errorf("%s: %v", c.meta, got)
		}
	}
}
