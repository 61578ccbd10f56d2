package main

import (
	"context"
	"io"
	"os"

	"github.com/toolbus/toolbus/mcp/facade"
)

// runMCP serves the session over stdio for a desktop MCP host. Stdio has
// no authentication of its own: the identity is the NATS login (--nkey,
// --creds, $NATS_*), so it is for a desktop host whose user owns those
// credentials; what that login may publish is all the host can do.
func runMCP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("mcp", stderr)
	user := fs.String("user", "", "the user of every call and listing; the NATS login, not this, decides what the host may publish")
	confirm := fs.String("confirm", string(facade.ConfirmHostUser), "who confirms calls: host_user (the host's elicitation) or approvers (never the host)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	policy, err := facade.ParseConfirm(*confirm)
	if err != nil {
		return err
	}
	cl, closeConn, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	defer closeConn()
	f := facade.New(cl, facade.Config{Confirm: policy})
	defer func() { _ = f.Drain(context.WithoutCancel(ctx)) }()
	in := io.Reader(os.Stdin)
	return f.ServeStdio(ctx, cn.session, *user, in, stdout)
}
