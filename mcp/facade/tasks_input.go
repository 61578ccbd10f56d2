package facade

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
)

// The tasks extension's input (2026-07-28, "Task Update Requests"): while
// a task's call waits for its host (a confirm park under host_user, or its
// bridged server's question) the task is input_required, tasks/get shows
// the elicitation under inputRequests, and tasks/update answers it with
// inputResponses keyed the same. The record holds what each key answers,
// so any facade process answers it.

const methodTasksUpdate = "tasks/update"

// taskInput is one request a task waits for its host to answer.
type taskInput struct {
	Kind     string          `json:"kind"` // inputConfirm or inputQuestion
	Park     bus.Parked      `json:"park"`
	ReplyID  string          `json:"reply_id"`
	Request  json.RawMessage `json:"request"`            // {"method": "elicitation/create", "params": ...}
	Question *question       `json:"question,omitempty"` // Kind inputQuestion
}

// elicitRequest is an inputRequests entry for params.
func elicitRequest(params mcp.ElicitationParams) json.RawMessage {
	raw, _ := json.Marshal(map[string]any{"method": mcp.MethodElicitationCreate, "params": params})
	return raw
}

// pendingInput is an input a task starts waiting for, with its key
// (unique over the task's life: a park id is never reused) and the
// task's status message meanwhile.
type pendingInput struct {
	key     string
	in      taskInput
	message string
}

// awaitInput records in the task that it waits for p: input_required.
func (t *taskRunners) awaitInput(ctx context.Context, r *taskRecord, p pendingInput) {
	_, _ = t.update(ctx, r, func(r *taskRecord) {
		if r.Inputs == nil {
			r.Inputs = map[string]taskInput{}
		}
		r.Inputs[p.key] = p.in
		r.Status, r.Message = mcp.TaskStatusInputRequired, p.message
	})
}

// taskView is a task as tasks/get (and notifications/tasks) show it: the
// Task, with the extension's inlined members — inputRequests while
// input_required; at 2026-07-28 the result of a completed task, the error
// of a failed one, and ttlMs and pollIntervalMs beside 2025-11-25's ttl
// and pollInterval, which mcp-go's clients read.
type taskView struct {
	mcp.Task
	TTLMs          *int64                     `json:"ttlMs,omitempty"`
	PollIntervalMs *int64                     `json:"pollIntervalMs,omitempty"`
	InputRequests  map[string]json.RawMessage `json:"inputRequests,omitempty"`
	Result         json.RawMessage            `json:"result,omitempty"`
	Error          *rpcError                  `json:"error,omitempty"`
	Meta           map[string]any             `json:"_meta,omitempty"`
}

func (r *taskRecord) detailed(modern bool) *taskView {
	v := &taskView{Task: r.task()}
	if len(r.Inputs) > 0 && r.Status == mcp.TaskStatusInputRequired {
		v.InputRequests = make(map[string]json.RawMessage, len(r.Inputs))
		for k, in := range r.Inputs {
			v.InputRequests[k] = in.Request
		}
	}
	if !modern {
		return v
	}
	v.TTLMs, v.PollIntervalMs = v.TTL, v.PollInterval
	switch r.Status {
	case mcp.TaskStatusCompleted:
		v.Result = r.Result
	case mcp.TaskStatusFailed:
		v.Error = &rpcError{Code: mcp.INTERNAL_ERROR, Message: r.Error}
	}
	return v
}

// update answers tasks/update: each response whose key the task waits
// for is the host's answer; other keys are ignored, as the extension
// says. The task is working again once nothing is outstanding.
func (s *taskFront) update(ctx context.Context, params json.RawMessage) (any, *rpcError) {
	var p struct {
		TaskID         string                     `json:"taskId"`
		InputResponses map[string]json.RawMessage `json:"inputResponses"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.TaskID == "" {
		return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: "params.taskId is required"}
	}
	r, err := s.store.getTask(ctx, s.session, s.user, p.TaskID)
	if err != nil {
		return nil, storeError(err)
	}
	var answered []string
	for key, raw := range p.InputResponses {
		in, ok := r.Inputs[key]
		if !ok || r.Status != mcp.TaskStatusInputRequired {
			continue
		}
		var res mcp.ElicitationResult
		if json.Unmarshal(raw, &res) != nil || res.Action == "" {
			continue
		}
		switch {
		case in.Kind == inputConfirm:
			s.sess.confirms.decide(ctx, in.Park, in.ReplyID, &res)
		case in.Kind == inputQuestion && in.Question != nil:
			s.sess.questions.answerQuestion(ctx, asked{p: in.Park, replyID: in.ReplyID, q: *in.Question}, &res)
		default:
			continue
		}
		answered = append(answered, key)
	}
	if len(answered) > 0 {
		_, err := s.runners.update(ctx, r, func(r *taskRecord) {
			for _, k := range answered {
				delete(r.Inputs, k)
			}
			if len(r.Inputs) == 0 && r.Status == mcp.TaskStatusInputRequired {
				r.Status, r.Message = mcp.TaskStatusWorking, "answered: "+strings.Join(answered, ", ")
			}
		})
		if err != nil {
			return nil, storeError(err)
		}
	}
	return &mcp.EmptyResult{}, nil
}

// confirmInput is the input a task waits for when its call parks for a
// confirmation its host's user may give (params: confirmParams).
func confirmInput(p bus.Parked, replyID string, params mcp.ElicitationParams) pendingInput {
	in := taskInput{Kind: inputConfirm, Park: p, ReplyID: replyID, Request: elicitRequest(params)}
	return pendingInput{inputConfirm + "-" + p.ID, in, fmt.Sprintf("input required: confirm the call of %s (or answer it on %s)", p.Name, p.Subject)}
}

// questionInput is the input a task waits for when its bridged server
// asks a.
func questionInput(a asked) pendingInput {
	params, _ := questionParams(a.q, true)
	q := a.q
	in := taskInput{Kind: inputQuestion, Park: a.p, ReplyID: a.replyID, Request: elicitRequest(params), Question: &q}
	return pendingInput{inputQuestion + "-" + a.p.ID, in, "input required: " + questionStatus(a)}
}

// notifySessionKey carries, in a task message's context, the MCP
// session its client is told of the task's changes on.
type notifySessionKey struct{}

// notifier returns how the client of ctx's task message is told of a
// task's change (notifications/tasks/status, 2025-11-25) through its MCP
// session; nil when it has none (2026-07-28: tasks_listen.go). mcp-go
// drops the notice when the session has no stream here: tasks/get still
// answers.
func (s *taskFront) notifier(ctx context.Context) func(*taskRecord) {
	sid, _ := ctx.Value(notifySessionKey{}).(string)
	if sid == "" {
		return nil
	}
	return func(r *taskRecord) {
		var params map[string]any
		raw, _ := json.Marshal(r.detailed(false))
		_ = json.Unmarshal(raw, &params)
		_ = s.sess.mcp.SendNotificationToSpecificClient(sid, mcp.MethodNotificationTasksStatus, params)
	}
}

// notify tells the host of the task run here that r changed.
func (t *taskRunners) notify(r *taskRecord) {
	if r == nil {
		return
	}
	t.mu.Lock()
	n := t.local[r.ID]
	t.mu.Unlock()
	if n != nil {
		n(r)
	}
}
