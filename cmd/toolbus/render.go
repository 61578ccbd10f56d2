package main

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// renderReply prints every result, then every parked call, of a reply.
func renderReply(w io.Writer, r *bus.Reply, session, replyID string) {
	for _, res := range r.Results {
		renderResult(w, res)
	}
	for _, p := range r.Parked {
		fmt.Fprintln(w, parkedLine(p, session, replyID))
	}
}

// renderResult prints "name: state" (with the error code) and then each
// output block on its own lines.
func renderResult(w io.Writer, r bus.Result) {
	head := r.Name + ": " + r.State
	if r.Error != nil && r.Error.Code != "" {
		head += " (" + r.Error.Code + ")"
	}
	fmt.Fprintln(w, head)
	for _, b := range r.Output {
		fmt.Fprintln(w, blockText(b))
	}
}

// parkedLine describes a parked call and the command that answers it.
func parkedLine(p bus.Parked, session, replyID string) string {
	where := fmt.Sprintf("--session %s --reply %s --tool %s", session, replyID, p.Name)
	switch p.Kind {
	case bus.KindConfirm:
		return fmt.Sprintf("%s: parked for a confirmation, call %s\n  allow: toolbus confirm %s %s [--remember]\n  deny:  toolbus confirm %s %s --deny",
			p.Name, p.ID, p.ID, where, p.ID, where)
	case bus.KindExternal:
		return fmt.Sprintf("%s: parked for its external result, call %s (on %s)\n  answer: toolbus answer %s %s '<output>'",
			p.Name, p.ID, p.Subject, p.ID, where)
	}
	return fmt.Sprintf("%s: %s behind the calls above, call %s", p.Name, p.Kind, p.ID)
}

// blockText is a text block's text, or a one-line description of a data
// block: "[data image/png, 1024 bytes]" or "[data application/pdf, <url>]".
func blockText(b bus.Block) string {
	switch {
	case b.Type == bus.BlockText:
		return b.Text
	case client.IsStored(b):
		return fmt.Sprintf("[data %s, %d bytes, stored as %s; fetch it with: toolbus fetch %s]", b.MediaType, b.Size, b.URL, b.URL)
	case b.Type == bus.BlockData && b.URL != "":
		return fmt.Sprintf("[data %s, %s]", b.MediaType, b.URL)
	case b.Type == bus.BlockData:
		return fmt.Sprintf("[data %s, %d bytes]", b.MediaType, dataLen(b.Data))
	}
	return fmt.Sprintf("[%s block]", b.Type)
}

// dataLen is the decoded length of base64 data, or its encoded length when
// it does not decode.
func dataLen(s string) int {
	if n, err := base64.StdEncoding.DecodeString(s); err == nil {
		return len(n)
	}
	return len(s)
}

// firstText is the first block of blocks as one short line.
func firstText(blocks []bus.Block) string {
	if len(blocks) == 0 {
		return ""
	}
	return short(blockText(blocks[0]))
}

// summaryWidth bounds the summary of an event line.
const summaryWidth = 100

// short folds s onto one line and cuts it to summaryWidth runes.
func short(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > summaryWidth {
		return string(r[:summaryWidth-1]) + "…"
	}
	return s
}

// eventLine is one line of `toolbus watch`: time, session (when withSession),
// type, tool call id and a summary of the data.
func eventLine(e *bus.Event, withSession bool) string {
	fields := []string{eventTime(e)}
	if withSession {
		fields = append(fields, orDash(e.SessionID))
	}
	fields = append(fields, e.Type, orDash(e.ToolCallID))
	if s := eventSummary(e); s != "" {
		fields = append(fields, s)
	}
	return strings.Join(fields, " ")
}

// eventTime is an event's time in local time, to the millisecond.
func eventTime(e *bus.Event) string {
	if t, err := time.Parse(time.RFC3339Nano, e.Time); err == nil {
		return t.Local().Format("2006-01-02 15:04:05.000")
	}
	return e.Time
}

func orDash(s string) string { return cmp.Or(s, "-") }

// eventSummary summarises an event's data: the state and first text of a
// result, the sequence number and text of progress, the parked calls, the
// states of a finished batch.
func eventSummary(e *bus.Event) string {
	switch e.Type {
	case bus.TypeCallResult:
		var r bus.Result
		if e.DataAs(&r) != nil {
			break
		}
		return strings.TrimSpace(r.Name + " " + r.State + ": " + firstText(r.Output))
	case bus.TypeCallProgress:
		var p bus.Progress
		if e.DataAs(&p) != nil {
			break
		}
		return strings.TrimSpace(fmt.Sprintf("#%d %s", p.Seq, firstText(p.Output)))
	case bus.TypeCallParked:
		var p bus.ParkedEvent
		if e.DataAs(&p) != nil {
			break
		}
		parts := make([]string, len(p.Calls))
		for i, c := range p.Calls {
			parts[i] = fmt.Sprintf("%s/%s (%s)", c.ID, c.Name, c.Kind)
		}
		return "parked " + strings.Join(parts, ", ")
	case bus.TypeBatchDone:
		var d bus.BatchDone
		if e.DataAs(&d) != nil {
			break
		}
		parts := make([]string, len(d.Results))
		for i, r := range d.Results {
			parts[i] = r.ID + " " + r.State
		}
		return fmt.Sprintf("reply %s done: %s", orDash(e.ReplyID), strings.Join(parts, ", "))
	}
	return short(string(e.Data))
}

// toolEntry reads name and description of a listed tool in any format: the
// OpenAI chat format nests them under "function".
func toolEntry(raw json.RawMessage) (name, description string) {
	var t struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		Function    *struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &t) != nil {
		return "?", short(string(raw))
	}
	if t.Name == "" && t.Function != nil {
		t.Name, t.Description = t.Function.Name, t.Function.Description
	}
	return t.Name, t.Description
}

// renderTools prints one line per tool, "name — description" (the first
// line of it), then the groups with [x] for the active ones.
func renderTools(w io.Writer, l *bus.ToolsList) {
	for _, raw := range l.Tools {
		name, desc := toolEntry(raw)
		fmt.Fprintln(w, toolLine(name, desc))
	}
	if len(l.Groups) > 0 {
		fmt.Fprintln(w, "\ngroups:")
		for _, g := range l.Groups {
			fmt.Fprintln(w, groupLine(g))
		}
	}
	if l.SkillsPrompt != "" {
		fmt.Fprintln(w, "\nskills prompt (for the model's system prompt):")
		for _, line := range strings.Split(strings.TrimRight(l.SkillsPrompt, "\n"), "\n") {
			fmt.Fprintln(w, "  "+line)
		}
	}
}

func toolLine(name, desc string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(desc), "\n")
	if first == "" {
		return name
	}
	return name + " — " + first
}

// groupLine is "  [x] name (scope) — description", [ ] when inactive.
func groupLine(g bus.GroupInfo) string {
	mark := "[ ]"
	if g.Active {
		mark = "[x]"
	}
	line := fmt.Sprintf("  %s %s", mark, g.Name)
	if g.Scope != "" {
		line += " (" + g.Scope + ")"
	}
	if g.Description != "" {
		line += " — " + g.Description
	}
	return line
}
