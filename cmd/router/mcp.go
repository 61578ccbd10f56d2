package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/mcp/facade"
)

// serveMCP serves the bus as an MCP server over streamable HTTP at
// /mcp/<session> on addr (--mcp-listen); stop shuts it down.
func serveMCP(nc *nats.Conn, addr, prefix string, stdout io.Writer, log *slog.Logger) (stop func(), err error) {
	f := facade.New(client.New(nc, client.Config{Prefix: prefix, Source: "toolbus/mcp"}), facade.Config{Logger: log})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("--mcp-listen: %w", err)
	}
	hs := &http.Server{Handler: f.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("mcp: serve", "err", err)
		}
	}()
	fmt.Fprintf(stdout, "toolbus: MCP (streamable HTTP) at http://%s/mcp/<session>\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		<-done
		f.Close()
	}, nil
}
