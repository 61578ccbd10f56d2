package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/toolbus/toolbus/bus"
)

// This file follows the provider's own tool search (docs/protocol.md 4.1,
// "deferred"): when a model response shows that the provider loaded
// deferred tools, Turn activates their groups on the bus with a reset_tools
// call ahead of the model's calls, so the router's rules stay as they are.

// load is one thing a provider's tool search loaded: a group (an OpenAI
// namespace) or a tool, or both for a call of a namespaced function.
type load struct {
	group, tool string
}

// responsesLoads returns what an OpenAI Responses output item loaded: the
// namespaces and functions of a tool_search_output, or the namespace of a
// function_call.
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

// anthropicLoads returns the tools a tool_search_tool_result block's
// tool_reference blocks name.
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

// loadGroups returns the final set of meta groups after t's loads, in
// order (the active ones, then the loaded ones), and the groups it adds;
// no groups to add when every loaded group is active already. A load of a
// group or tool the listing does not offer deferred (an unknown group, a
// group of external scope, a tool the session cannot reach) is ignored:
// its calls then fail as they would without it.
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

// ResetInput is the input of reset_tools that activates exactly groups,
// in their order: {"g1": true, ...}, or {} to deactivate every meta group
// (docs/protocol.md 4.2).
func ResetInput(groups []string) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, g := range groups {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(g) // a string always marshals
		b.Write(name)
		b.WriteString(":true")
	}
	b.WriteByte('}')
	return b.Bytes()
}

// loadCall returns the reset_tools call that activates the groups of t's
// loads, and the groups it adds; nil when t loaded nothing new. list is
// the session's listing with deferred tools: it names the active groups
// and which group each deferred tool is in.
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
