package groups

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/session"
)

const resetDescription = "Activate or deactivate tool groups. Pass the final set: every group set to true is active " +
	"afterwards and every other group is inactive. Deactivate groups you no longer need."

// activation switches a session's meta groups: reset_tools (Reset) and
// the path search_tools shares with it (activate), one compare-and-set of
// the session each.
type activation struct {
	defs     *definitions
	sessions *session.Store
	pinned   []string // the groups pinned visible (Config.Pinned)
}

// Reset runs reset_tools for a session: input is the final set of meta
// groups. Validation comes first and changes nothing on failure. It
// returns the result text, or an invalid_input *bus.Error whose message is
// the text the model reads.
func (a *activation) Reset(ctx context.Context, session string, input json.RawMessage) (string, error) {
	keys, vals, err := orderedObject(input)
	if err != nil {
		return "", bus.Errorf(bus.CodeInvalidInput, "Invalid arguments: %v", err)
	}
	meta := a.defs.metaGroups()
	isMeta := func(n string) bool {
		return slices.ContainsFunc(meta, func(g bus.Group) bool { return g.Name == n })
	}
	var bad []string
	for _, k := range keys {
		if !isMeta(k) {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		names := make([]string, len(meta))
		for i, g := range meta {
			names[i] = g.Name
		}
		return "", bus.Errorf(bus.CodeInvalidInput, "Invalid group name(s): %s. The current available groups are: %s",
			strings.Join(bad, ", "), strings.Join(names, ", "))
	}
	final := map[string]bool{} // a repeated key: the last value counts
	for i, k := range keys {
		if typ := jsonType(vals[i]); typ != "boolean" {
			return "", bus.Errorf(bus.CodeInvalidInput, "Invalid arguments: the argument '%s' should be a bool value, but got %s.", k, typ)
		}
		final[k] = string(bytes.TrimSpace(vals[i])) == "true"
	}
	var on []string
	for _, k := range keys {
		if final[k] && !slices.Contains(on, k) {
			on = append(on, k)
		}
	}
	return a.activate(ctx, session, func([]string) []string { return on })
}

// activate is the one path that changes a session's meta groups, for
// reset_tools and search_tools alike: final gets the meta groups active in
// the latest stored session and returns the meta groups active afterwards
// (names that are not meta groups are dropped); one compare-and-set
// replaces the meta part of the session's active set and leaves the rest.
// It returns the text reset_tools answers with.
func (a *activation) activate(ctx context.Context, session string, final func(cur []string) []string) (string, error) {
	meta := a.defs.metaGroups()
	isMeta := func(n string) bool {
		return slices.ContainsFunc(meta, func(g bus.Group) bool { return g.Name == n })
	}
	var on []string
	_, err := a.sessions.Update(ctx, session, func(sess *Session) error {
		cur := slices.DeleteFunc(slices.Clone(sess.Active), func(n string) bool { return !isMeta(n) })
		on = slices.DeleteFunc(slices.Clone(final(cur)), func(n string) bool { return !isMeta(n) })
		sess.Active = slices.DeleteFunc(sess.Active, isMeta)
		sess.Active = append(sess.Active, on...)
		return nil
	})
	if err != nil {
		return "", err
	}
	var names, instr []string
	for _, g := range meta {
		if slices.Contains(on, g.Name) {
			names = append(names, g.Name)
			if g.Instructions != "" {
				instr = append(instr, fmt.Sprintf(`<group name="%s">%s</group>`, g.Name, g.Instructions))
			}
		}
	}
	pinned := slices.DeleteFunc(slices.Clone(a.pinned), func(g string) bool {
		_, defined := a.defs.Group(g)
		return slices.Contains(names, g) || !defined && g != bus.GroupBasic
	})
	if len(names) == 0 {
		if len(pinned) > 0 {
			return "All tool groups are currently deactivated, except the pinned group(s), always active: " + strings.Join(pinned, ", ") + ".", nil
		}
		return "All tool groups are currently deactivated.", nil
	}
	text := "The currently activated tool group(s): " + strings.Join(names, ", ") + "."
	if len(pinned) > 0 {
		text += " The pinned group(s) stay active: " + strings.Join(pinned, ", ") + "."
	}
	if len(instr) > 0 {
		text += "\n<tool-instructions>\nThe tool instructions are a collection of suggestions, rules and notifications about how to use the tools in the activated groups.\n" +
			strings.Join(instr, "\n") + "\n</tool-instructions>"
	}
	return text, nil
}

// orderedObject splits a JSON object into its keys and raw values in input order.
func orderedObject(b json.RawMessage) ([]string, []json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("input must be a JSON object")
	}
	var keys []string
	var vals []json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys = append(keys, tok.(string))
		vals = append(vals, v)
	}
	return keys, vals, nil
}

func jsonType(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "null"
	}
	switch v[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 'n':
		return "null"
	case 't', 'f':
		return "boolean"
	}
	return "number"
}
