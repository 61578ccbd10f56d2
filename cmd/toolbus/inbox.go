package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/toolbus/toolbus/inbox"
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
	defer nc.Close()
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
