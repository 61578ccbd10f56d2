package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/toolbus/toolbus/inbox"
	"github.com/toolbus/toolbus/mcp/facade"
)

// runInbox serves the approval inbox (docs/inbox.md): a page listing the
// calls that wait across sessions, answered with this command's NATS
// login (the approver's, for confirmations only, or the operator's).
func runInbox(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("inbox", stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "host:port of the page; an address other than loopback needs --inbox-token or --inbox-token-file")
	token := fs.String("inbox-token", "", "the page's token (at least 16 characters; default: a random one, printed at start)")
	tokenFile := fs.String("inbox-token-file", "", "FILE whose first line is the page's token")
	approver := fs.Bool("approver", false, "log in as the approver role (--nkey DIR/approver.nk --inbox-prefix _INBOX.approver): confirmations only, the waiting calls polled every second")
	source := fs.String("source", "toolbus/inbox", "who answers, as the parked record's answered_by says (the answers' CloudEvents source)")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	nc, err := cn.connect(ctx)
	if err != nil {
		return err
	}
	r, err := inbox.Open(ctx, nc, *listen, *token, *tokenFile, inbox.Config{Prefix: cn.prefix, Source: *source, Approver: *approver})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // then open pages lose their connection
		defer cancel()
		r.Close(cctx)
	}()
	fmt.Fprintln(stdout, r.Banner())
	<-ctx.Done()
	return nil
}

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
	cl, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	f := facade.New(cl, facade.Config{Confirm: policy})
	defer func() { _ = f.Drain(context.WithoutCancel(ctx)) }()
	in := io.Reader(os.Stdin)
	return f.ServeStdio(ctx, cn.session, *user, in, stdout)
}
