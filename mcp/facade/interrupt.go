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
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = c.bus.Cancel(cctx, c.session, replyID)
}
