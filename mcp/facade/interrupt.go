package facade

import (
	"context"
	"time"
)

// interrupt cancels the bus call of reply id replyID (docs/protocol.md
// 5.4) for a call whose MCP request ended: the client cancelled it, went
// away, or cancelled the task. It uses a context of its own, since ctx
// has ended.
func (c *caller) interrupt(ctx context.Context, replyID string) {
	interrupt(ctx, c.bus.Cancel, c.session, replyID)
}

// interrupt cancels the bus call of reply id replyID with cancel
// (P.cancel), bounded by a context of its own.
func interrupt(ctx context.Context, cancel func(ctx context.Context, session, replyID string, calls ...string) error, session, replyID string) {
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	_ = cancel(cctx, session, replyID)
}
