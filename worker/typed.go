package worker

import (
	"context"
	"fmt"

	json "github.com/goccy/go-json"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
)

// Func is a typed tool: In is decoded from the validated input before it
// runs; Out becomes the output (see Register).
type Func[In, Out any] func(ctx context.Context, c *Call, in In) (Out, error)

// Register adds a typed tool to w. The input schema is derived from In unless
// def.InputSchema is set. Out becomes the output as follows: a string is one
// text block; a bus.Block or []bus.Block is used as is; a *bus.ExecResult is
// passed through; anything else is marshalled to JSON in a text block.
func Register[In, Out any](w *Worker, def bus.ToolDef, fn Func[In, Out]) error {
	if len(def.InputSchema) == 0 {
		s, err := schemas.For[In]()
		if err != nil {
			return fmt.Errorf("worker: tool %s: %w", def.Name, err)
		}
		def.InputSchema = s
	}
	return w.Handle(def, func(ctx context.Context, c *Call) (*bus.ExecResult, error) {
		var in In
		if len(c.Input) > 0 {
			if err := json.Unmarshal(c.Input, &in); err != nil {
				return nil, fmt.Errorf("input does not decode: %w", err)
			}
		}
		out, err := fn(ctx, c, in)
		if err != nil {
			return nil, err
		}
		if s, ok := any(out).(string); ok && c != nil { // the usual text, without boxing it
			return c.textResult(s), nil
		}
		return toResult(out)
	})
}

func toResult(out any) (*bus.ExecResult, error) {
	switch v := out.(type) {
	case string:
		return &bus.ExecResult{Output: bus.Text(v)}, nil
	case bus.Block:
		return &bus.ExecResult{Output: []bus.Block{v}}, nil
	case []bus.Block:
		return &bus.ExecResult{Output: v}, nil
	case *bus.ExecResult:
		return v, nil
	case nil:
		return &bus.ExecResult{}, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("output does not encode: %w", err)
	}
	return &bus.ExecResult{Output: bus.Text(string(b))}, nil
}
