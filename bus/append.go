package bus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// AppendJSON appends r as json.Marshal would give it, but for whitespace in
// the raw members and unescaped HTML, without reflection (docs/bus.md).
func (r *ExecRequest) AppendJSON(b []byte) []byte {
	b = appendField(b, `{"call":{"id":`, r.Call.ID)
	b = appendField(b, `,"name":`, r.Call.Name)
	if len(r.Call.Input) > 0 {
		b = append(b, `,"input":`...)
		b = appendCompact(b, r.Call.Input)
	}
	b = append(b, `},"user":`...)
	b = appendRaw(b, r.User)
	b = append(b, `,"context":`...)
	b = appendRaw(b, r.Context)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(r.Attempt), 10)
	if r.ProgressReply {
		b = append(b, `,"progress_reply":true`...)
	}
	if r.ProgressInbox != "" {
		b = appendField(b, `,"progress_inbox":`, r.ProgressInbox)
	}
	if len(r.State) > 0 {
		b = append(b, `,"state":`...)
		b = appendCompact(b, r.State)
	}
	return append(b, '}')
}

// appendRaw appends a raw JSON member compacted, null when it is empty.
func appendRaw(b []byte, raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return append(b, "null"...)
	}
	return appendCompact(b, raw)
}

// appendCompact appends raw without insignificant whitespace, as
// json.Marshal does; raw that is not JSON is copied as it is.
func appendCompact(b []byte, raw []byte) []byte {
	if !bytes.ContainsAny(raw, " \t\n\r") { // no whitespace JSON counts
		return append(b, raw...)
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return append(b, raw...)
	}
	return buf.Bytes()
}

// appendChecked appends raw compacted, or fails naming member when raw is
// not JSON, as json.Marshal refuses it.
func appendChecked(b []byte, raw []byte, member string) ([]byte, error) {
	if !validJSON(raw) {
		return nil, fmt.Errorf("bus: %s is not valid JSON", member)
	}
	return appendCompact(b, raw), nil
}

// appendMember appends the member key with raw (appendChecked) when set.
func appendMember(b []byte, key string, raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return b, nil
	}
	return appendChecked(append(append(append(b, `,"`...), key...), `":`...), raw, key)
}

// AppendJSON appends r as JSON, the value json.Marshal gives.
func (r *Result) AppendJSON(b []byte) ([]byte, error) {
	b = appendField(b, `{"id":`, r.ID)
	b = appendField(b, `,"name":`, r.Name)
	b = appendField(b, `,"state":`, r.State)
	b, err := appendOutput(b, r.Output)
	if err != nil {
		return nil, err
	}
	if e := r.Error; e != nil {
		b = appendField(b, `,"error":{"code":`, e.Code)
		b = appendField(b, `,"message":`, e.Message)
		if len(e.Details) > 0 {
			b, _ = appendArray(append(b, `,"details":`...), len(e.Details), func(b []byte, i int) ([]byte, error) {
				b = appendField(b, `{"path":`, e.Details[i].Path)
				return append(appendField(b, `,"message":`, e.Details[i].Message), '}'), nil
			})
		}
		if e.RetryAfterMS != 0 {
			b = append(b, `,"retry_after_ms":`...)
			b = strconv.AppendInt(b, e.RetryAfterMS, 10)
		}
		b = append(b, '}')
	}
	if b, err = appendMember(b, "metadata", r.Metadata); err != nil {
		return nil, err
	}
	if t := r.Task; t != nil {
		b = appendField(b, `,"task":{"id":`, t.ID)
		b = appendField(b, `,"state":`, t.State)
		b = appendField(b, `,"subject":`, t.Subject)
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// AppendJSON appends r as JSON, the value json.Marshal gives.
func (r *ExecResult) AppendJSON(b []byte) ([]byte, error) {
	b = appendField(b, `{"state":`, r.State)
	b, err := appendOutput(b, r.Output)
	if err != nil {
		return nil, err
	}
	if b, err = appendMember(b, "metadata", r.Metadata); err != nil {
		return nil, err
	}
	if b, err = appendMember(b, "state_patch", r.StatePatch); err != nil {
		return nil, err
	}
	if r.Cancel != "" {
		b = appendField(b, `,"cancel":`, r.Cancel)
	}
	return append(b, '}'), nil
}

// AppendJSON appends p as JSON, the value json.Marshal gives.
func (p *Progress) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, int64(p.Seq), 10)
	b, err := appendOutput(b, p.Output)
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendOutput appends the "output" member: null for a nil slice.
func appendOutput(b []byte, out []Block) ([]byte, error) {
	b = append(b, `,"output":`...)
	if out == nil {
		return append(b, "null"...), nil
	}
	return AppendBlocks(b, out)
}

// AppendBlocks appends out as a JSON array of blocks.
func AppendBlocks(b []byte, out []Block) ([]byte, error) {
	return appendArray(b, len(out), func(b []byte, i int) ([]byte, error) { return out[i].appendJSON(b) })
}

// appendArray appends a JSON array of n elements, elem appending each.
func appendArray(b []byte, n int, elem func(b []byte, i int) ([]byte, error)) ([]byte, error) {
	b = append(b, '[')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = elem(b, i); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// Size is a first guess at the bytes of r's JSON, for a buffer.
func (r *Result) Size() int {
	return 96 + len(r.ID) + len(r.Name) + len(r.Metadata) + outputSize(r.Output)
}

// Size is a first guess at the bytes of r's JSON, for a buffer.
func (r *ExecResult) Size() int {
	return 48 + len(r.Metadata) + len(r.StatePatch) + outputSize(r.Output)
}

func outputSize(out []Block) int {
	n := 2
	for i := range out {
		n += 48 + len(out[i].Text) + len(out[i].Data) + len(out[i].URL)
	}
	return n
}

// AppendJSONString appends s as a JSON string, as the bus's encoders do.
func AppendJSONString(b []byte, s string) []byte { return appendString(b, s) }

// AppendJSON appends b as JSON, the value json.Marshal gives; a raw member
// that is not JSON is refused.
func (b *Batch) AppendJSON(out []byte) ([]byte, error) {
	out = append(out, `{"calls":`...)
	var err error
	if b.Calls == nil {
		out = append(out, "null"...)
	} else if out, err = appendArray(out, len(b.Calls), func(out []byte, i int) ([]byte, error) {
		c := &b.Calls[i]
		out = appendField(out, `{"id":`, c.ID)
		out = appendField(out, `,"name":`, c.Name)
		if len(c.Input) > 0 {
			out = append(out, `,"input":`...)
			if !validJSON(c.Input) { // appendChecked's check, the member named only when it fails
				return nil, fmt.Errorf("bus: calls[%d].input is not valid JSON", i)
			}
			out = appendCompact(out, c.Input)
		}
		if c.Background {
			out = append(out, `,"background":true`...)
		}
		return append(out, '}'), nil
	}); err != nil {
		return nil, err
	}
	if out, err = appendMember(out, "user", b.User); err != nil {
		return nil, err
	}
	if out, err = appendMember(out, "context", b.Context); err != nil {
		return nil, err
	}
	if b.Request != nil { // rare, and a tree of definitions: json.Marshal
		r, err := json.Marshal(b.Request)
		if err != nil {
			return nil, err
		}
		out = append(out, `,"request":`...)
		out = append(out, r...)
	}
	if b.Events != "" {
		out = appendField(out, `,"events":`, b.Events)
	}
	if b.SessionRev != 0 {
		out = append(out, `,"sessionrev":`...)
		out = strconv.AppendUint(out, b.SessionRev, 10)
	}
	return append(out, '}'), nil
}
