package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/mcp/facade"
)

// runMCP serves the session over stdio for a desktop MCP host.
func runMCP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("mcp", stderr)
	user := fs.String("user", "", "the user of every call and listing")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if err := checkSession(fs, cn.session); err != nil {
		return err
	}
	nc, err := nats.Connect(cn.url, nats.Name("toolbus-mcp"))
	if err != nil {
		return fmt.Errorf("connect %s: %w", cn.url, err)
	}
	defer nc.Close()
	f := facade.New(nc, facade.Config{Prefix: cn.prefix})
	defer f.Close()
	in := io.Reader(os.Stdin)
	return f.ServeStdio(ctx, cn.session, *user, in, stdout)
}
