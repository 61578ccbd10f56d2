package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	fastjson "github.com/goccy/go-json"
)

// Strict decoding (docs/protocol.md 7): tool definitions, groups, the
// request-scoped configuration and answers refuse a member the protocol does
// not name, so a misspelt input_schema cannot become "no schema". JSON
// schemas inside are values, never looked into; everything else is lenient.

// DecodeStrict decodes the JSON object b into v, refusing unknown members
// (docs/protocol.md 7.4). The error is a bad_request *Error: "<noun> must be
// a JSON object", or one starting with what and naming the member.
func DecodeStrict(b []byte, v any, noun, what string) error {
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return Errorf(CodeBadRequest, "%s must be a JSON object", noun)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("unexpected data after the value")
	}
	if err == nil {
		return nil
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if n, uerr := strconv.Unquote(name); uerr == nil {
			name = n
		}
		return Errorf(CodeBadRequest, "%s: unknown member %q", what, name)
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
		return Errorf(CodeBadRequest, "%s: member %q must be %s, got %s", what, te.Field, jsonKind(te.Type), te.Value)
	}
	return Errorf(CodeBadRequest, "%s: %s", what, strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

// DecodeToolDef decodes one tool definition strictly: an unknown member or a
// missing input_schema is a bad_request *Error naming it.
func DecodeToolDef(b []byte) (ToolDef, error) {
	type plain ToolDef
	p := plain{ConcurrencySafe: true}
	if err := DecodeStrict(b, &p, "a tool definition", "tool definition"); err != nil {
		return ToolDef{}, err
	}
	d := ToolDef(p)
	d.Defaults()
	if len(d.InputSchema) == 0 || isNull(d.InputSchema) {
		return d, Errorf(CodeBadRequest, "tool definition: input_schema is missing")
	}
	return d, nil
}

// DecodeGroup decodes one group definition strictly.
func DecodeGroup(b []byte) (Group, error) {
	var g Group
	return g, DecodeStrict(b, &g, "a group definition", "group")
}

// UnmarshalJSON decodes a request-scoped configuration strictly: an unknown
// member, of the request or of one of its external tools, is a bad_request
// *Error that names it.
func (r *Request) UnmarshalJSON(b []byte) error {
	var p struct {
		MergeMode     string            `json:"merge_mode"`
		ExternalTools []json.RawMessage `json:"external_tools"`
	}
	if err := DecodeStrict(b, &p, "request", "request"); err != nil {
		return err
	}
	out := Request{MergeMode: p.MergeMode}
	for i, raw := range p.ExternalTools {
		var t ExternalTool
		what := fmt.Sprintf("request.external_tools[%d]", i)
		if err := DecodeStrict(raw, &t, what, what); err != nil {
			return err
		}
		out.ExternalTools = append(out.ExternalTools, t)
	}
	*r = out
	return nil
}

// UnmarshalJSON decodes an answer strictly: a member that neither an
// external answer nor a confirmation has is a bad_request *Error that
// names it. CheckKind then refuses the members of the other kind.
func (a *Answer) UnmarshalJSON(b []byte) error {
	type plain Answer
	var p plain
	if err := DecodeStrict(b, &p, "an answer", "answer"); err != nil {
		return err
	}
	*a = Answer(p)
	return nil
}

// CheckKind returns a bad_request *Error when the answer has a member that
// an answer to a call parked as kind does not have: an external answer is
// {state, output}, a confirmation {confirmed, input, rules}.
func (a *Answer) CheckKind(kind string) error {
	type member struct {
		name string
		set  bool
	}
	others, shape := []member{{"state", a.State != ""}, {"output", a.Output != nil}},
		`a confirmation is {"confirmed", "input_digest", "input", "rules", "reason"}`
	if kind != KindConfirm {
		others, shape = []member{{"confirmed", a.Confirmed != nil}, {"input", a.Input != nil}, {"rules", a.Rules != nil},
			{"input_digest", a.InputDigest != ""}, {"reason", a.Reason != ""}}, `an answer to an external call is {"state", "output"}`
	}
	for _, m := range others {
		if m.set {
			return Errorf(CodeBadRequest, "answer: unknown member %q (%s)", m.name, shape)
		}
	}
	return nil
}

// UnmarshalJSON decodes a registration leniently at the top: a bad group
// fails it whole (bad_request), a bad tool definition is left out of Tools
// and listed in Refused.
func (r *Register) UnmarshalJSON(b []byte) error {
	type plain Register
	var p struct {
		plain
		Groups []json.RawMessage `json:"groups"`
		Tools  []json.RawMessage `json:"tools"`
	}
	if err := fastjson.Unmarshal(b, &p); err != nil { // encoding/json's scan of 8 MiB was most of the CPU
		return err
	}
	out := Register(p.plain)
	out.Groups, out.Tools = nil, nil
	for i, raw := range p.Groups {
		g, err := DecodeGroup(raw)
		if err != nil { // a bad_request *Error (DecodeStrict)
			return Errorf(CodeBadRequest, "groups[%d]: %s; nothing was registered", i, err.(*Error).Message)
		}
		out.Groups = append(out.Groups, g)
	}
	for i, raw := range p.Tools {
		d, err := DecodeToolDef(raw)
		if err != nil { // a bad_request *Error (DecodeStrict, or input_schema missing)
			reason := strings.TrimPrefix(err.(*Error).Message, "tool definition: ")
			out.Refused = append(out.Refused, Rejection{Name: nameOf(raw, i), Reason: reason})
			continue
		}
		out.Tools = append(out.Tools, d)
	}
	*r = out
	return nil
}

// MaxDefinition bounds a tool or group definition's JSON encoding: a
// worker's descriptions, titles or groups of megabytes put every session's
// listing past the max payload (TestAttackDefinitionsFillListings).
const MaxDefinition = 128 << 10

// nameOf returns the name member of a definition that could not be decoded,
// or "tools[i]" when it has none.
func nameOf(raw json.RawMessage, i int) string {
	var n struct {
		Name any `json:"name"`
	}
	if json.Unmarshal(raw, &n) == nil {
		if s, ok := n.Name.(string); ok && s != "" {
			return s
		}
	}
	return fmt.Sprintf("tools[%d]", i)
}

// Equal reports whether two definitions are the same: their JSON values
// are equal once defaults are applied (member order, white space and an
// explicit default do not matter).
func (d *ToolDef) Equal(o *ToolDef) bool {
	a, b := *d, *o
	a.normalize()
	b.normalize()
	ja, err1 := json.Marshal(&a)
	jb, err2 := json.Marshal(&b)
	if err1 != nil || err2 != nil {
		return false
	}
	if bytes.Equal(ja, jb) {
		return true
	}
	var va, vb any
	if json.Unmarshal(ja, &va) != nil || json.Unmarshal(jb, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// normalize applies the defaults and drops members that hold their
// default in another spelling (null, []).
func (d *ToolDef) normalize() {
	d.Defaults()
	if isNull(d.OutputSchema) {
		d.OutputSchema = nil
	}
	if len(d.Groups) == 0 {
		d.Groups = nil
	}
}

// Equal reports whether two group definitions are the same.
func (g Group) Equal(o Group) bool {
	return g.Name == o.Name && g.Description == o.Description && g.Instructions == o.Instructions &&
		g.Scope == o.Scope && g.ActiveByDefault == o.ActiveByDefault && g.ActivateOnSkill == o.ActivateOnSkill &&
		slices.Equal(g.Skills, o.Skills)
}
