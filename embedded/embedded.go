// Package embedded starts nats-server with JetStream inside this process: one
// node for a laptop's router, or a cluster of nodes on loopback ports for
// tests of replicated buckets and streams, where a node can be stopped and
// started again.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config configures an in-process nats-server with JetStream.
type Config struct {
	// Listen is host:port to listen on; "" means 127.0.0.1 on a random port.
	Listen string
	// StoreDir is the JetStream store directory; "" means a temporary one
	// chosen by the server.
	StoreDir string
	// ConfigFile, when set, is a nats-server configuration file (users,
	// permissions, TLS) whose settings are loaded before Listen and StoreDir
	// are applied.
	ConfigFile string
	// ReadyTimeout bounds the wait for the server to accept connections;
	// zero means 10 s.
	ReadyTimeout time.Duration
	// Logs, when true, routes the server's own logs to stderr.
	Logs bool
}

// Start starts a nats-server with JetStream in this process and waits
// until it accepts connections. Callers stop it with Shutdown and
// WaitForShutdown.
func Start(cfg Config) (*server.Server, error) {
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		o, err := server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("embedded: nats config %s: %w", cfg.ConfigFile, err)
		}
		opts = o
	}
	opts.JetStream = true
	opts.NoSigs = true
	if cfg.StoreDir != "" {
		opts.StoreDir = cfg.StoreDir
	}
	host, port := "127.0.0.1", -1
	if cfg.Listen != "" {
		h, p, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded: listen address %q: %w", cfg.Listen, err)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("embedded: listen port %q: %w", p, err)
		}
		if h != "" {
			host = h
		}
		port = n
	}
	// A configuration file that names no port listens where Listen says
	// (by default 127.0.0.1 on a random port), not on nats-server's 4222.
	if cfg.ConfigFile == "" || cfg.Listen != "" || opts.Port == 0 {
		opts.Host, opts.Port = host, port
	}
	if opts.Port > 0 {
		// Say plainly when the port is taken, rather than "not ready".
		ln, err := net.Listen("tcp", net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)))
		if err != nil {
			return nil, fmt.Errorf("embedded: cannot listen on %s (is another router or nats-server running there? "+
				"join it with --nats nats://%s, or pick another --listen): %w",
				net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)), net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)), err)
		}
		_ = ln.Close()
	}
	opts.MaxPayload = 8 << 20
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded: nats-server: %w", err)
	}
	if cfg.Logs {
		s.ConfigureLogger()
	}
	go s.Start()
	wait := cfg.ReadyTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if !s.ReadyForConnections(wait) {
		s.Shutdown()
		return nil, errors.New("embedded: nats-server did not become ready")
	}
	return s, nil
}
