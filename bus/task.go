package bus

import (
	"time"
)

// Background tasks (docs/protocol.md 5.10): a call that times out while its
// tool declares Background, or the call asks, goes on as a task with state
// "background" and a TaskHandle.
const (
	// StateBackground is the state of a result whose call goes on as a
	// background task; the task's end comes as io.toolbus.task.done.
	StateBackground = "background"
	// TypeTaskQuery asks a router about the session's tasks on
	// P.tasks.<session>; TypeTaskReply answers it.
	TypeTaskQuery = "io.toolbus.task.query"
	TypeTaskReply = "io.toolbus.task.reply"
	// TypeTaskDone, on P.events.<session>, says a task ended: its data is
	// the Task with its result.
	TypeTaskDone = "io.toolbus.task.done"
	// CodeUnknownTask: no task of that id in the session (another
	// session's task is unknown too).
	CodeUnknownTask = "unknown_task"
)

// Verbs of TaskQuery.Op.
const (
	TaskGet    = "get"    // the tasks named by IDs
	TaskList   = "list"   // every task of the session, newest first
	TaskWait   = "wait"   // the tasks named by IDs, once they ended or TimeoutMS passed
	TaskCancel = "cancel" // ends the one task named by IDs, interrupted
	TaskOutput = "output" // one task with its progress output so far
)

// Bounds of a task query.
const (
	MaxTaskIDs       = 16
	MaxTaskWaitMS    = 120_000
	DefaultTaskWait  = 60_000
	MaxTaskOutputLen = 32 << 10
)

// Tasks is the subject of the task verbs of session.
func (s Subjects) Tasks(session string) string { return s.p + "tasks." + session }

// TaskHandle is what a result in state "background" carries: the task's
// id, its state, and the subject of its verbs.
type TaskHandle struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Subject string `json:"subject"`
}

// Task is one background task as the verbs show it. State is
// "background" while it runs, then its result's state.
type Task struct {
	ID       string     `json:"id"`
	Session  string     `json:"session"`
	ReplyID  string     `json:"reply_id"`
	CallID   string     `json:"call_id"`
	Tool     string     `json:"tool"`
	State    string     `json:"state"`
	Started  time.Time  `json:"started"`
	Deadline time.Time  `json:"deadline"`
	Ended    *time.Time `json:"ended,omitempty"`
	Result   *Result    `json:"result,omitempty"`
}

// Running reports whether t has not ended.
func (t *Task) Running() bool { return t.State == StateBackground }

// TaskQuery is the data of io.toolbus.task.query.
type TaskQuery struct {
	Op        string   `json:"op"`
	IDs       []string `json:"ids,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
	// Any, on wait, returns once one of the tasks ended (wait_all false).
	Any bool `json:"any,omitempty"`
}

// TaskReply is the data of io.toolbus.task.reply.
type TaskReply struct {
	Tasks []Task `json:"tasks"`
	// Output, on output, is the task's progress so far (its last
	// MaxTaskOutputLen bytes of text), oldest first; Truncated says older
	// progress was left out.
	Output    []Block `json:"output,omitempty"`
	Truncated bool    `json:"truncated,omitempty"`
}
