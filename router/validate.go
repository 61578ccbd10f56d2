package router

import (
	"encoding/json"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/schemas"
)

// validate checks a resolved call's input against its tool's schema. It
// returns the input as the tool gets it, or the call's invalid_input (or
// resolution error) result when it cannot run.
func validate(c bus.Call, t groups.Resolved) (json.RawMessage, *bus.Result) {
	if t.Code != "" {
		return nil, ptr(bus.ErrorResult(c, t.Code, t.Message))
	}
	input, v, err := schemas.ParseInput(c.Input)
	if err != nil {
		d := bus.Detail{Path: "/", Message: err.Error()}
		return nil, ptr(bus.ErrorResult(c, bus.CodeInvalidInput, schemas.InvalidInputMessage(c.Name, []bus.Detail{d}), d))
	}
	var schema *schemas.Schema
	switch {
	case t.Tool != nil:
		schema = t.Tool.Schema
	case t.External != nil:
		schema = t.External.Schema
	}
	if schema != nil {
		if problems := schema.Validate(v); len(problems) > 0 {
			return nil, ptr(bus.ErrorResult(c, bus.CodeInvalidInput, schemas.InvalidInputMessage(c.Name, problems), problems...))
		}
	}
	return input, nil
}

func ptr[T any](v T) *T { return &v }
