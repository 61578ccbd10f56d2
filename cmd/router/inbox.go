package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/inbox"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/security"
)

// inboxOptions are the --inbox-* flags: the approval inbox served beside
// the router (docs/inbox.md).
type inboxOptions struct {
	listen, token, tokenFile string
}

func inboxFlags(fs *flag.FlagSet) *inboxOptions {
	o := &inboxOptions{}
	fs.StringVar(&o.listen, "inbox-listen", "", "host:port: serve the approval inbox there (docs/inbox.md); beyond loopback it needs --inbox-token or --inbox-token-file")
	fs.StringVar(&o.token, "inbox-token", "", "the inbox page's token (default: a random one, kept in inbox.token in the --secure directory or the user cache directory's toolbus/, whose path is printed at start)")
	fs.StringVar(&o.tokenFile, "inbox-token-file", "", "FILE whose first line is the inbox page's token")
	return o
}

// conn is the inbox's own login, never the router's: under --secure the
// approver's (DIR/approver.nk), on open NATS the router's settings on a
// connection of its own. approver says which.
func (o *inboxOptions) conn(router natsconn.Config, secureDir string) (c natsconn.Config, approver bool, err error) {
	c = router
	c.Creds, c.NKey, c.User, c.Password, c.Token, c.InboxPrefix = "", "", "", "", "", ""
	switch {
	case secureDir != "":
		seed := security.SeedFile(secureDir, security.RoleApprover)
		if _, err := os.Stat(seed); err != nil {
			return c, false, fmt.Errorf("--inbox-listen: %s has no approver user (%s)", secureDir, seed)
		}
		c.NKey, c.InboxPrefix = seed, "_INBOX."+security.RoleApprover
		return c, true, nil
	case router.Creds != "" || router.NKey != "" || router.User != "" || router.Token != "":
		return c, false, errors.New("--inbox-listen: the inbox must not answer with the router's credentials; run `toolbus inbox` with the approver's (or operator's) login instead, or use --secure")
	}
	c = router // open NATS: the same settings, a connection of its own
	c.InboxPrefix = ""
	return c, false, nil
}

// serve starts the inbox; stop ends it and its connection.
func (o *inboxOptions) serve(ctx context.Context, router natsconn.Config, secureDir, prefix string, stdout io.Writer, log *slog.Logger) (stop func(), err error) {
	c, approver, err := o.conn(router, secureDir)
	if err != nil {
		return nil, err
	}
	nc, err := c.Connect("toolbus-inbox", nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("--inbox-listen: %w", err)
	}
	r, err := inbox.Open(ctx, nc, o.listen, o.token, o.tokenFile, inbox.Config{Prefix: prefix, Approver: approver, Logger: log})
	if err != nil {
		nc.Close()
		return nil, err
	}
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), inboxCloseWait)
		defer cancel()
		r.Close(ctx)
		nc.Close()
	}
	if !r.Generated {
		fmt.Fprintln(stdout, r.Banner())
		return stop, nil
	}
	// A generated token goes to a private file, never to the router's
	// output (a log collector keeps that).
	file, err := inbox.SaveToken(secureDir, r.Token())
	if err != nil {
		stop()
		return nil, fmt.Errorf("--inbox-listen: %w (or give --inbox-token-file)", err)
	}
	fmt.Fprintln(stdout, r.BannerSaved(file))
	return stop, nil
}

// inboxCloseWait is how long the inbox's requests under way get on
// shutdown before open pages lose their connection.
const inboxCloseWait = 2 * time.Second
