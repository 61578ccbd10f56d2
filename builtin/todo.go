package builtin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// TodoItem is one entry of the input of todo_write.
type TodoItem struct {
	Content  string `json:"content"`
	Status   string `json:"status"`
	Priority string `json:"priority,omitempty"`
}

// TodoIn is the input of todo_write.
type TodoIn struct {
	Todos []TodoItem `json:"todos"`
}

// Todo is one entry of the session's list, as kept in its state.
type Todo struct {
	ID string `json:"id"`
	TodoItem
}

// Todo statuses.
const (
	TodoPending    = "pending"
	TodoInProgress = "in_progress"
	TodoCompleted  = "completed"
)

const todoSchema = `{"type":"object","properties":{"todos":{"type":"array","description":"The whole todo list, replacing the current one; an empty list clears it.",` +
	`"items":{"type":"object","properties":{` +
	`"content":{"type":"string","description":"What to do: a short imperative sentence."},` +
	`"status":{"type":"string","description":"pending, in_progress or completed; at most one item is in_progress."},` +
	`"priority":{"type":"string","description":"high, medium or low (optional)."}},` +
	`"required":["content","status"]}}},"required":["todos"]}`

var todoDef = bus.ToolDef{Name: "todo_write",
	Description: "Write the session's todo list: pass the whole list every time (it replaces the current one). Use it to plan multi-step work " +
		"and to show progress: mark one item in_progress while you work on it and completed as soon as it is done.",
	InputSchema: json.RawMessage(todoSchema), StateInjected: true, ReadOnly: false, ConcurrencySafe: false,
	Permission: bus.PermissionAllow, TimeoutMS: 10000}

func registerTodo(w *worker.Worker) error {
	return worker.Register(w, todoDef, func(_ context.Context, c *worker.Call, in TodoIn) (string, error) {
		text, list, err := WriteTodos(c.State, in)
		if err != nil {
			return "", err
		}
		if err := c.PatchState(map[string]any{"todos": list}); err != nil {
			return "", err
		}
		return text, nil
	})
}

// WriteTodos checks in against every rule before it changes anything and
// returns the result text and the new list (an item whose content matches
// one of the current list, in state's "todos", keeps its id).
func WriteTodos(state json.RawMessage, in TodoIn) (string, []Todo, error) {
	inProgress := 0
	for i, t := range in.Todos {
		n := i + 1
		if strings.TrimSpace(t.Content) == "" {
			return "", nil, fmt.Errorf("todo_write refused: item %d has blank content; nothing was changed", n)
		}
		if !slices.Contains([]string{TodoPending, TodoInProgress, TodoCompleted}, t.Status) {
			return "", nil, fmt.Errorf("todo_write refused: item %d has the unknown status %q (use pending, in_progress or completed); nothing was changed", n, t.Status)
		}
		if !slices.Contains([]string{"", "high", "medium", "low"}, t.Priority) {
			return "", nil, fmt.Errorf("todo_write refused: item %d has the unknown priority %q (use high, medium or low); nothing was changed", n, t.Priority)
		}
		if t.Status == TodoInProgress {
			inProgress++
		}
	}
	if inProgress > 1 {
		return "", nil, fmt.Errorf("todo_write refused: %d items are in_progress; at most one may be; nothing was changed", inProgress)
	}
	var cur struct {
		Todos []Todo `json:"todos"`
	}
	if len(state) > 0 {
		_ = json.Unmarshal(state, &cur) // a corrupt list is replaced
	}
	next := 0
	for _, t := range cur.Todos {
		if n, err := strconv.Atoi(t.ID); err == nil && n > next {
			next = n
		}
	}
	taken := map[string]bool{}
	list := make([]Todo, 0, len(in.Todos))
	for _, t := range in.Todos {
		id := ""
		for _, old := range cur.Todos {
			if old.Content == t.Content && !taken[old.ID] {
				id = old.ID
				break
			}
		}
		if id == "" {
			next++
			id = strconv.Itoa(next)
		}
		taken[id] = true
		list = append(list, Todo{ID: id, TodoItem: t})
	}
	return TodoText(list), list, nil
}

// TodoText is the output of todo_write for list.
func TodoText(list []Todo) string {
	if len(list) == 0 {
		return "Todo list cleared (0 items)."
	}
	open := 0
	for _, t := range list {
		if t.Status != TodoCompleted {
			open++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d open todo(s):", open)
	for _, t := range list {
		mark := cmp.Or(map[string]string{TodoInProgress: "[~]", TodoCompleted: "[x]"}[t.Status], "[ ]")
		fmt.Fprintf(&b, "\n- %s %s", mark, t.Content)
		if t.Priority != "" {
			fmt.Fprintf(&b, " (priority: %s)", t.Priority)
		}
	}
	return b.String()
}
