package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
)

// This file converts between the model APIs' messages (bus.FormatOpenAI,
// FormatOpenAIResponses, FormatAnthropic, FormatGemini) and toolbus batches.

// ModelTurn is the tool calls of one assistant turn in a model API's
// shape, as a toolbus batch.
type ModelTurn struct {
	// Format is the API the message came from.
	Format string
	// Calls are the turn's tool calls in the order the model made them,
	// their ids kept; an OpenAI arguments string is passed on as a string
	// input (3.1), so a malformed one is that call's invalid_input result.
	Calls []bus.Call
	noID  map[string]bool // calls whose id toolbus made up (Gemini): answered without one
	loads []load          // what the provider's tool search loaded in this turn
}

// ErrNoToolCalls is returned by ParseModelTurn for a message that asks
// for no tool.
var ErrNoToolCalls = errors.New("client: the message has no tool calls")

// Batch returns the turn as a batch to send (add User and Context as
// needed).
func (t *ModelTurn) Batch() bus.Batch { return bus.Batch{Calls: t.Calls} }

// ParseModelTurn reads an assistant message of format, or the API's whole
// response, and returns its tool calls: openai tool_calls (of the first
// choice), openai-responses function_call items, anthropic tool_use blocks,
// gemini functionCall parts (of the first candidate). It returns
// ErrNoToolCalls when there are none, and an error naming what is wrong when
// the message is not of the format.
func ParseModelTurn(format string, message []byte) (*ModelTurn, error) {
	t, err := parseTurn(format, message)
	if err != nil {
		return nil, err
	}
	if len(t.Calls) == 0 {
		return nil, ErrNoToolCalls
	}
	return t, nil
}

// parseTurn is ParseModelTurn without ErrNoToolCalls (a turn may only load tools).
func parseTurn(format string, message []byte) (*ModelTurn, error) {
	parse, ok := turnParsers[format]
	if !ok {
		return nil, fmt.Errorf("client: unknown model format %q (want openai, openai-responses, anthropic or gemini)", format)
	}
	t := &ModelTurn{Format: format}
	if err := parse(t, message); err != nil {
		return nil, fmt.Errorf("client: %s message: %w", format, err)
	}
	seen := make(map[string]bool, len(t.Calls))
	for _, c := range t.Calls {
		if c.ID == "" || c.Name == "" {
			return nil, fmt.Errorf("client: %s message: a tool call without an id or a name", format)
		}
		if seen[c.ID] {
			return nil, fmt.Errorf("client: %s message: tool call id %q appears twice", format, c.ID)
		}
		seen[c.ID] = true
	}
	return t, nil
}

// turnParsers read an assistant message of each format into a turn.
var turnParsers = map[string]func(*ModelTurn, []byte) error{
	bus.FormatOpenAI: (*ModelTurn).parseOpenAI, bus.FormatOpenAIResponses: (*ModelTurn).parseResponses,
	bus.FormatAnthropic: (*ModelTurn).parseAnthropic, bus.FormatGemini: (*ModelTurn).parseGemini,
}

// listOf decodes raw, a JSON array of T or an object W, into the array or
// what pick takes from W.
func listOf[T, W any](raw []byte, pick func(*W) []T) ([]T, error) {
	if b := bytes.TrimSpace(raw); len(b) > 0 && b[0] == '[' {
		var l []T
		err := json.Unmarshal(raw, &l)
		return l, err
	}
	var w W
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, err
	}
	return pick(&w), nil
}

// argumentsInput is an OpenAI arguments string as a call input (the router
// parses it); "" means {}.
func argumentsInput(args string) json.RawMessage {
	if strings.TrimSpace(args) == "" {
		return json.RawMessage(`{}`)
	}
	b, _ := json.Marshal(args) // a string always marshals
	return b
}

func (t *ModelTurn) parseOpenAI(raw []byte) error {
	type toolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	type message struct {
		Role      string     `json:"role"`
		ToolCalls []toolCall `json:"tool_calls"`
	}
	var m struct {
		message
		Choices []struct {
			Message message `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	msg := m.message
	if len(m.Choices) > 0 {
		msg = m.Choices[0].Message
	}
	for _, tc := range msg.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue // custom tools carry no JSON arguments
		}
		t.Calls = append(t.Calls, bus.Call{ID: tc.ID, Name: tc.Function.Name, Input: argumentsInput(tc.Function.Arguments)})
	}
	return nil
}

func (t *ModelTurn) parseResponses(raw []byte) error {
	type item struct {
		Type      string `json:"type"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		// Arguments is a function_call's string; a tool_search_call's
		// is an object.
		Arguments json.RawMessage `json:"arguments"`
		// Tools are a tool_search_output's loaded tools.
		Tools []json.RawMessage `json:"tools"`
	}
	type response struct {
		item
		Output []item `json:"output"`
	}
	items, err := listOf(raw, func(r *response) []item {
		if r.Type == "function_call" {
			return []item{r.item}
		}
		return r.Output
	})
	if err != nil {
		return err
	}
	for _, it := range items {
		t.loads = append(t.loads, responsesLoads(it.Type, it.Namespace, it.Name, it.Tools)...)
		if it.Type == "function_call" {
			var args string
			if len(it.Arguments) > 0 && json.Unmarshal(it.Arguments, &args) != nil {
				return fmt.Errorf("function_call %q: arguments must be a string", it.CallID)
			}
			t.Calls = append(t.Calls, bus.Call{ID: it.CallID, Name: it.Name, Input: argumentsInput(args)})
		}
	}
	return nil
}

func (t *ModelTurn) parseAnthropic(raw []byte) error {
	type block struct {
		Type string `json:"type"`
		bus.Call
		// Content is a tool_search_tool_result's result.
		Content json.RawMessage `json:"content"`
	}
	type message struct {
		Content []block `json:"content"`
	}
	blocks, err := listOf(raw, func(m *message) []block { return m.Content })
	if err != nil {
		return err
	}
	for _, b := range blocks {
		if b.Type == "tool_search_tool_result" {
			t.loads = append(t.loads, anthropicLoads(b.Content)...)
		}
		if b.Type == "tool_use" {
			t.Calls = append(t.Calls, bus.Call{ID: b.ID, Name: b.Name, Input: b.Input})
		}
	}
	return nil
}

func (t *ModelTurn) parseGemini(raw []byte) error {
	type part struct {
		FunctionCall *struct {
			ID   string          `json:"id"`
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		} `json:"functionCall"`
	}
	type content struct {
		Parts []part `json:"parts"`
	}
	type response struct {
		content
		Candidates []struct {
			Content content `json:"content"`
		} `json:"candidates"`
	}
	parts, err := listOf(raw, func(r *response) []part {
		if len(r.Candidates) > 0 {
			return r.Candidates[0].Content.Parts
		}
		return r.Parts
	})
	if err != nil {
		return err
	}
	for i, p := range parts {
		fc := p.FunctionCall
		if fc == nil {
			continue
		}
		id := fc.ID
		if id == "" { // Gemini matches by name and order; toolbus needs an id
			id = fmt.Sprintf("gemini-call-%d", i)
			if t.noID == nil {
				t.noID = map[string]bool{}
			}
			t.noID[id] = true
		}
		t.Calls = append(t.Calls, bus.Call{ID: id, Name: fc.Name, Input: fc.Args})
	}
	return nil
}

// ModelReply is a reply in a model API's shape.
type ModelReply struct {
	// Messages are the tool-result message(s) for the finished calls, in
	// call order, in the API's shape: one message for anthropic and gemini,
	// one "tool" message per result (plus a "user" one for images) for
	// openai, function_call_output items for openai-responses. Empty when
	// every call is parked.
	Messages []json.RawMessage
	// Parked are the calls that wait for an answer (docs/protocol.md 3.2);
	// their results come later as call.result events or a batch.done.
	Parked []bus.Parked
	// Activated are the groups Turn activated because the provider's tool
	// search loaded their tools (docs/protocol.md 4.1, "deferred").
	Activated []string
}

// Reply turns a batch reply (or a batch.done's results) into t's API's
// tool-result messages, leaving out results of calls not in t.
func (t *ModelTurn) Reply(results []bus.Result, parked []bus.Parked) (*ModelReply, error) {
	byID := make(map[string]bus.Result, len(results))
	for _, r := range results {
		byID[r.ID] = r
	}
	var ordered []bus.Result
	for _, c := range t.Calls {
		if r, ok := byID[c.ID]; ok {
			ordered = append(ordered, r)
		}
	}
	out := &ModelReply{Parked: parked}
	if out.Parked == nil {
		out.Parked = []bus.Parked{}
	}
	if len(ordered) == 0 {
		return out, nil
	}
	var msgs []any
	switch t.Format {
	case bus.FormatOpenAI:
		msgs = openAIMessages(ordered)
	case bus.FormatOpenAIResponses:
		msgs = responsesItems(ordered)
	case bus.FormatAnthropic:
		msgs = []any{anthropicMessage(ordered)}
	case bus.FormatGemini:
		msgs = []any{t.geminiContent(ordered)}
	default:
		return nil, fmt.Errorf("client: unknown model format %q", t.Format)
	}
	for _, m := range msgs {
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("client: %s reply: %w", t.Format, err)
		}
		out.Messages = append(out.Messages, b)
	}
	return out, nil
}

// Turn runs one model turn: it parses message, calls its tools in session,
// and returns the tool-result messages of the same API (ErrNoToolCalls when
// there are none). When the provider's tool search loaded deferred tools,
// Turn first activates their groups with a reset_tools call
// (docs/protocol.md 4.1), named in ModelReply.Activated.
func (c *Client) Turn(ctx context.Context, session, format string, message []byte, b bus.Batch, opts ...CallOption) (*ModelReply, error) {
	t, err := parseTurn(format, message)
	if err != nil {
		return nil, err
	}
	var load *bus.Call
	var added []string
	if len(t.loads) > 0 { // the deferred listing says which groups the loads are in
		list, err := c.Query(ctx, session, bus.ToolsQuery{Format: t.Format, Deferred: true, Request: b.Request, User: b.User})
		if err != nil {
			return nil, fmt.Errorf("client: the groups of the tools the model loaded: %w", err)
		}
		load, added = t.loadCall(list)
	}
	if len(t.Calls) == 0 && load == nil {
		return nil, ErrNoToolCalls
	}
	b.Calls = t.Calls
	if load != nil {
		b.Calls = append([]bus.Call{*load}, t.Calls...)
	}
	reply, err := c.Call(ctx, session, b, opts...)
	if err != nil {
		return nil, err
	}
	if len(t.Calls) == 0 {
		return nil, ErrNoToolCalls
	}
	out, err := t.Reply(reply.Results, reply.Parked)
	if err != nil {
		return nil, err
	}
	if load != nil && slices.ContainsFunc(reply.Results, func(r bus.Result) bool { return r.ID == load.ID && r.State == bus.StateSuccess }) {
		out.Activated = added
	}
	return out, nil
}

// resultText is what the model reads of a result: its text blocks and a
// line for each other block.
func resultText(r bus.Result) string {
	var parts []string
	for _, b := range r.Output {
		switch {
		case b.Type == bus.BlockText:
			parts = append(parts, b.Text)
		case IsStored(b):
			if !strings.Contains(strings.Join(parts, "\n"), b.URL) { // the sender's text already names it (5.9)
				parts = append(parts, storedText(b))
			}
		case b.URL != "" && !isImage(b):
			parts = append(parts, fmt.Sprintf("[File %s (%s).]", b.URL, b.MediaType))
		case b.Data != "" && !isImage(b):
			parts = append(parts, fmt.Sprintf("[A %s attachment of %d base64 characters was returned.]", b.MediaType, len(b.Data)))
		}
	}
	return strings.Join(parts, "\n")
}

// storedText is the line a model reads for a stored output its result's
// text does not name (docs/protocol.md 11, read_output).
func storedText(b bus.Block) string {
	digest := ""
	if r, err := offload.ParseRef(b.URL); err == nil && r.Digest != "" {
		digest = ", sha256 " + r.Digest
	}
	return fmt.Sprintf("[Stored output %s (%s, %d bytes%s), too large to show here: read any part of it with read_output "+
		"({\"ref\": that URL, \"offset\": <byte> or \"line\": <n>, \"limit\": <n>}).]", b.URL, b.MediaType, b.Size, digest)
}

// isImage reports whether b is an image the APIs take as an image part.
func isImage(b bus.Block) bool {
	return b.Type == bus.BlockData && strings.HasPrefix(b.MediaType, "image/") && !IsStored(b)
}

func dataURL(b bus.Block) string {
	if b.URL != "" {
		return b.URL
	}
	return "data:" + b.MediaType + ";base64," + b.Data
}

// isError: a result the model is told failed; a background task's handle
// (docs/protocol.md 5.10) did not fail.
func isError(r bus.Result) bool { return r.State != bus.StateSuccess && r.State != bus.StateBackground }

func openAIMessages(rs []bus.Result) []any {
	type msg struct {
		Role       string `json:"role"`
		ToolCallID string `json:"tool_call_id,omitempty"`
		Content    any    `json:"content"`
	}
	var out []any
	var images []any
	for _, r := range rs {
		text := resultText(r)
		imgs := imagesOf(r)
		for _, b := range imgs {
			images = append(images, map[string]any{"type": "image_url", "image_url": map[string]string{"url": dataURL(b)}})
		}
		if len(imgs) > 0 {
			text = strings.TrimSpace(text + fmt.Sprintf("\n[%d image(s) follow in the next message.]", len(imgs)))
		}
		out = append(out, msg{Role: "tool", ToolCallID: r.ID, Content: text})
	}
	if len(images) > 0 {
		parts := append([]any{map[string]string{"type": "text", "text": "Images returned by the tool calls above:"}}, images...)
		out = append(out, msg{Role: "user", Content: parts})
	}
	return out
}

// imagesOf returns the blocks of r that are images (isImage).
func imagesOf(r bus.Result) []bus.Block {
	var out []bus.Block
	for _, b := range r.Output {
		if isImage(b) {
			out = append(out, b)
		}
	}
	return out
}

func responsesItems(rs []bus.Result) []any {
	type item struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
		Output any    `json:"output"`
	}
	out := make([]any, 0, len(rs))
	for _, r := range rs {
		imgs := imagesOf(r)
		if len(imgs) == 0 {
			out = append(out, item{Type: "function_call_output", CallID: r.ID, Output: resultText(r)})
			continue
		}
		var parts []any
		if text := resultText(r); text != "" {
			parts = append(parts, map[string]string{"type": "input_text", "text": text})
		}
		for _, b := range imgs {
			parts = append(parts, map[string]string{"type": "input_image", "image_url": dataURL(b)})
		}
		out = append(out, item{Type: "function_call_output", CallID: r.ID, Output: parts})
	}
	return out
}

func anthropicMessage(rs []bus.Result) any {
	type toolResult struct {
		Type      string `json:"type"`
		ToolUseID string `json:"tool_use_id"`
		Content   []any  `json:"content"`
		IsError   bool   `json:"is_error,omitempty"`
	}
	content := make([]any, 0, len(rs))
	for _, r := range rs {
		var parts []any
		if text := resultText(r); text != "" {
			parts = append(parts, map[string]string{"type": "text", "text": text})
		}
		for _, b := range imagesOf(r) {
			src := map[string]string{"type": "base64", "media_type": b.MediaType, "data": b.Data}
			if b.URL != "" {
				src = map[string]string{"type": "url", "url": b.URL}
			}
			parts = append(parts, map[string]any{"type": "image", "source": src})
		}
		if parts == nil {
			parts = []any{}
		}
		content = append(content, toolResult{Type: "tool_result", ToolUseID: r.ID, Content: parts, IsError: isError(r)})
	}
	return map[string]any{"role": "user", "content": content}
}

func (t *ModelTurn) geminiContent(rs []bus.Result) any {
	type blob struct {
		MimeType string `json:"mimeType"`
		Data     string `json:"data"`
	}
	type fileData struct {
		MimeType string `json:"mimeType"`
		FileURI  string `json:"fileUri"`
	}
	type part struct {
		InlineData *blob     `json:"inlineData,omitempty"`
		FileData   *fileData `json:"fileData,omitempty"`
	}
	type response struct {
		ID       string         `json:"id,omitempty"`
		Name     string         `json:"name"`
		Response map[string]any `json:"response"`
		Parts    []part         `json:"parts,omitempty"`
	}
	parts := make([]any, 0, len(rs))
	for _, r := range rs {
		fr := response{Name: r.Name, Response: map[string]any{"output": resultText(r)}}
		if !t.noID[r.ID] {
			fr.ID = r.ID
		}
		if isError(r) {
			fr.Response = map[string]any{"error": resultText(r)}
		}
		for _, b := range imagesOf(r) {
			if b.URL != "" {
				fr.Parts = append(fr.Parts, part{FileData: &fileData{MimeType: b.MediaType, FileURI: b.URL}})
			} else {
				fr.Parts = append(fr.Parts, part{InlineData: &blob{MimeType: b.MediaType, Data: b.Data}})
			}
		}
		parts = append(parts, map[string]any{"functionResponse": fr})
	}
	return map[string]any{"role": "user", "parts": parts}
}

// This file follows the provider's own tool search (docs/protocol.md 4.1):
// deferred tools it loaded have their groups activated by a reset_tools call
// ahead of the model's calls.

// load is a group (an OpenAI namespace) or a tool, or both, that a
// provider's tool search loaded.
type load struct {
	group, tool string
}

// responsesLoads returns what an OpenAI Responses output item loaded.
func responsesLoads(typ, namespace, name string, tools []json.RawMessage) []load {
	switch typ {
	case "function_call":
		if namespace != "" {
			return []load{{group: namespace, tool: name}}
		}
	case "tool_search_output":
		var out []load
		for _, raw := range tools {
			var t struct {
				Type string `json:"type"`
				Name string `json:"name"`
			}
			if json.Unmarshal(raw, &t) != nil || t.Name == "" {
				continue
			}
			if t.Type == "namespace" {
				out = append(out, load{group: t.Name})
			} else {
				out = append(out, load{tool: t.Name})
			}
		}
		return out
	}
	return nil
}

// anthropicLoads returns the tools a tool_search_tool_result block names.
func anthropicLoads(content json.RawMessage) []load {
	var c struct {
		Type       string `json:"type"`
		References []struct {
			Type     string `json:"type"`
			ToolName string `json:"tool_name"`
		} `json:"tool_references"`
	}
	if json.Unmarshal(content, &c) != nil {
		return nil // an error result (tool_search_tool_result_error) loads nothing
	}
	var out []load
	for _, r := range c.References {
		if r.Type == "tool_reference" && r.ToolName != "" {
			out = append(out, load{tool: r.ToolName})
		}
	}
	return out
}

// loadGroups returns the meta groups after t's loads (the active ones, then
// the loaded ones) and those it adds. A load the listing does not offer
// deferred is ignored: its calls then fail as they would without it.
func loadGroups(list *bus.ToolsList, loads []load) (final, added []string) {
	deferred := map[string]bool{}
	for _, g := range list.Deferred {
		deferred[g] = true
	}
	for _, g := range list.Groups {
		if g.Scope == bus.ScopeMeta && g.Active {
			final = append(final, g.Name)
		}
	}
	for _, l := range loads {
		g := l.group
		if !deferred[g] {
			g = list.Deferred[l.tool]
		}
		if g == "" || slices.Contains(final, g) {
			continue
		}
		final = append(final, g)
		added = append(added, g)
	}
	return final, added
}

// ResetInput is the reset_tools input that activates exactly groups, in
// order: {"g1": true, ...}, or {} for none (docs/protocol.md 4.2).
func ResetInput(groups []string) json.RawMessage {
	members := make([]string, len(groups))
	for i, g := range groups {
		name, _ := json.Marshal(g) // a string always marshals
		members[i] = string(name) + ":true"
	}
	return json.RawMessage("{" + strings.Join(members, ",") + "}")
}

// loadCall returns the reset_tools call that activates the groups of t's
// loads (nil when nothing is new) and the groups it adds.
func (t *ModelTurn) loadCall(list *bus.ToolsList) (*bus.Call, []string) {
	final, added := loadGroups(list, t.loads)
	if len(added) == 0 {
		return nil, nil
	}
	id := "toolbus-load"
	for n := 1; slices.ContainsFunc(t.Calls, func(c bus.Call) bool { return c.ID == id }); n++ {
		id = fmt.Sprintf("toolbus-load-%d", n)
	}
	return &bus.Call{ID: id, Name: resetTools, Input: ResetInput(final)}, added
}

// resetTools is the router's group switch (docs/protocol.md 4.2).
const resetTools = "reset_tools"
