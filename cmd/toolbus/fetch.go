package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// runFetch prints (or with -o saves) a stored output: the object a data
// block's nats-object:// url refers to (PROTOCOL.md 5.9).
func runFetch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("fetch", stderr)
	outPath := fs.String("o", "", "write the output to this file instead of stdout")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError(fs, "fetch takes one reference (nats-object://<bucket>/<name>), got %d arguments", len(pos))
	}
	cl, closeConn, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	obj, err := cl.Fetch(ctx, pos[0])
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
	tmp, err := os.CreateTemp(filepath.Dir(*outPath), "."+filepath.Base(*outPath)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, obj)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fetch %s: %w", pos[0], err)
	}
	if err := os.Rename(tmp.Name(), *outPath); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%d bytes (%s) written to %s\n", n, obj.MediaType, *outPath)
	return nil
}
