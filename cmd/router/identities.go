package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/internal/life"
	"github.com/toolbus/toolbus/security"
)

// identitiesPoll is how often the router rereads its identities file.
const identitiesPoll = time.Second

// watchIdentities rereads file every poll until ctx ends; when it changed,
// it reloads the embedded server's configuration first (reload, under
// --secure: the users `toolbus security agent` added, and the shared
// agent's new deny entries), then the bindings. In that order a session is
// never bound while the shared agent may still publish in it. A reload
// that fails is logged and tried again at the next poll.
func watchIdentities(ctx context.Context, file string, b *security.Bindings, reload func() error, poll time.Duration, log *slog.Logger) {
	last, _ := os.ReadFile(file)
	life.Every(ctx, poll, func(time.Time) {
		cur, err := os.ReadFile(file)
		if err != nil || bytes.Equal(cur, last) {
			return
		}
		if reload != nil {
			if err := reload(); err != nil {
				log.Error("router: the server configuration did not reload; the identities stay as they were", "err", err)
				return
			}
		}
		if err := b.Load(file); err != nil {
			log.Error("router: identities not reloaded", "file", file, "err", err)
			return
		}
		last = cur
		log.Info("router: identities reloaded", "file", file)
	})
}

// reloadServer reloads the embedded server s from cfgFile with the
// settings embedded.Start gave it (listen address, store, JetStream).
func reloadServer(s *server.Server, cfgFile, listen, storeDir string) error {
	opts, err := server.ProcessConfigFile(cfgFile)
	if err != nil {
		return fmt.Errorf("nats config %s: %w", cfgFile, err)
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return err
	}
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok {
		return fmt.Errorf("the embedded server has no TCP listener")
	}
	opts.Host, opts.Port = cmp.Or(host, "127.0.0.1"), addr.Port
	opts.JetStream, opts.NoSigs, opts.StoreDir, opts.MaxPayload = true, true, storeDir, 8<<20
	return s.ReloadOptions(opts)
}
