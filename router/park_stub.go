package router

import (
	"context"

	"github.com/toolbus/toolbus/bus"
)

func (b *batch) park(_ context.Context, c *callState) bus.Result {
	return bus.ErrorResult(c.call, bus.CodeInternal, "parking is not implemented yet")
}
