package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/toolbus/toolbus/bus"
)

func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("cancel", stderr)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError(fs, "cancel needs a reply id")
	}
	for _, id := range pos {
		if !bus.ValidID(id) {
			return usageError(fs, "id %q must match ^[A-Za-z0-9_-]{1,128}$", id)
		}
	}
	cl, closeConn, err := cn.open(fs)
	if err != nil {
		return err
	}
	defer closeConn()
	replyID, calls := pos[0], pos[1:]
	if err := cl.Cancel(ctx, cn.session, replyID, calls...); err != nil {
		return err
	}
	what := "every call"
	if len(calls) > 0 {
		what = "calls " + strings.Join(calls, ", ")
	}
	fmt.Fprintf(stdout, "cancel sent: %s of reply %s in session %s\n", what, replyID, cn.session)
	return nil
}
