package main

import (
	"context"
	"io"
	"os"

	"github.com/toolbus/toolbus/mcp/facade"
)

// runMCP serves the session over stdio for a desktop MCP host.
func runMCP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("mcp", stderr)
	user := fs.String("user", "", "the user of every call and listing")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	cl, closeConn, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	defer closeConn()
	f := facade.New(cl, facade.Config{})
	defer f.Close()
	in := io.Reader(os.Stdin)
	return f.ServeStdio(ctx, cn.session, *user, in, stdout)
}
