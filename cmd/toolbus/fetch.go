package main

import (
	"context"
	"fmt"
	"io"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/private"
)

// runFetch prints (or with -o saves) a stored output: the object a data
// block's nats-object:// url refers to (protocol 5.9), read through the
// routers on P.outputs.<session> (the session is the name's first token
// unless --session says otherwise), or with --direct from the object store
// itself (operators).
func runFetch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("fetch", stderr)
	outPath := fs.String("o", "", "write the output to this file instead of stdout")
	direct := fs.Bool("direct", false, "read the outputs object store itself, not through the routers (operators only)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError(fs, "fetch takes one reference (nats-object://<bucket>/<name>#sha256=<digest>), got %d arguments", len(pos))
	}
	cl, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	var obj *client.Output
	switch {
	case *direct:
		obj, err = cl.Outputs().FetchDirect(ctx, pos[0])
	case cli.Given(fs, "session"): // else the name's first token is the session
		obj, err = cl.Outputs().FetchSession(ctx, cn.session, pos[0])
	default:
		obj, err = cl.Outputs().Fetch(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	defer obj.Close()
	if *outPath == "" {
		_, err = io.Copy(stdout, obj)
		return err
	}
	// Written next to the target and renamed, so a failed fetch (a digest
	// mismatch, a lost connection) leaves no partial file behind.
	n, err := private.WriteFile(*outPath, obj)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", pos[0], err)
	}
	fmt.Fprintf(stderr, "%d bytes (%s) written to %s\n", n, obj.MediaType, *outPath)
	return nil
}
