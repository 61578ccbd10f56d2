// Command router runs a toolbus router. With no --nats URL it starts an
// embedded nats-server with JetStream, so one command gives a working bus.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/skills"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

func main() { cli.Main("router", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats", "", "NATS server URL to join; empty starts an embedded nats-server with JetStream")
	listen := fs.String("listen", "127.0.0.1:4222", "host:port of the embedded nats-server")
	data := fs.String("data", "", "JetStream store directory of the embedded server (default: a directory under the system temp dir)")
	natsConfig := fs.String("nats-config", "", "nats-server configuration file for the embedded server (users, permissions, TLS)")
	prefix := fs.String("prefix", bus.DefaultPrefix, "subject prefix of the deployment")
	withBuiltin := fs.Bool("builtin", true, "serve the built-in tools in-process")
	replicas := fs.Int("replicas", 1, "JetStream replicas of buckets and streams")
	eventsMemory := fs.Bool("events-memory", false, "keep the session events stream in memory (parked calls, sessions and the ledger stay on disk); only for a new deployment")
	heartbeat := fs.Duration("heartbeat", bus.DefaultHeartbeat, "worker heartbeat interval")
	id := fs.String("id", "", "router instance id (default: random)")
	configPath := fs.String("config", "", "router config file (YAML or JSON): groups, default permissions, park_ttl")
	workdir := fs.String("workdir", "", "base directory of the built-in file tools and shell; empty serves neither")
	shellAllow := fs.String("shell-allow", "", "comma-separated programs the built-in shell may start (default: any)")
	mcpListen := fs.String("mcp-listen", "", "host:port to serve MCP (streamable HTTP) at /mcp/<session>; empty serves none")
	var skillDirs dirList
	fs.Var(&skillDirs, "skills", "a skill folder, or a folder of skill folders, to serve (repeatable; a later one wins on a name clash, the P_skills object store over all)")
	limitsFlags := limitFlags(fs)
	observe := cli.ObserveFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	obs, err := observe.Start(ctx, "toolbus", "toolbus-router", stdout, stderr)
	if err != nil {
		return err
	}
	defer obs.Stop()
	log, reg := obs.Log, obs.Metrics
	fileCfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	limits := fileCfg.Limits.override(limitsFlags)
	storeCfg := store.Config{Replicas: *replicas, Heartbeat: *heartbeat, EventsMemory: *eventsMemory}
	limits.apply(&storeCfg)

	url := *natsURL
	if url == "" {
		dir := *data
		if dir == "" {
			dir = os.TempDir() + "/toolbus-data"
		}
		s, err := embedded.Start(embedded.Config{Listen: *listen, StoreDir: dir, ConfigFile: *natsConfig})
		if err != nil {
			return err
		}
		defer func() {
			s.Shutdown()
			s.WaitForShutdown()
		}()
		url = s.ClientURL()
		fmt.Fprintf(stdout, "toolbus: embedded NATS listening on %s (JetStream store %s)\n", url, dir)
	}
	nc, err := nats.Connect(url, nats.Name("toolbus-router"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect %s: %w", url, err)
	}
	defer nc.Close()

	r, err := router.New(nc, router.Config{ID: *id, Prefix: *prefix, Logger: log,
		Store:  storeCfg,
		Groups: fileCfg.Groups, DefaultMode: fileCfg.Permissions.Mode, DefaultRules: fileCfg.Permissions.Rules,
		DefaultWorkDirs: fileCfg.Permissions.WorkDirs, ParkTTL: fileCfg.parkTTL, Metrics: reg, Skills: skillDirs})
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	var w *worker.Worker
	if *withBuiltin {
		w, err = worker.New(nc, worker.Config{Prefix: *prefix, Heartbeat: *heartbeat, Logger: log, Observer: obs.WorkerObserver(0),
			InlineLimit: int(limits.InlineOutput), MaxOutput: int64(limits.MaxOutput)})
		if err == nil {
			cfg := builtin.Config{WorkDir: *workdir, ShellAllow: splitList(*shellAllow)}
			if *workdir != "" {
				var m *skills.Materializer
				if m, err = skills.NewMaterializer(r.Skills(), filepath.Join(os.TempDir(), "toolbus-skills-"+r.ID())); err == nil {
					cfg.Skills = m
				}
			}
			if err == nil {
				err = builtin.RegisterWith(w, cfg)
			}
		}
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			r.Stop()
			return fmt.Errorf("built-in tools: %w", err)
		}
	}
	fmt.Fprintf(stdout, "toolbus: router %s serving prefix %q on %s\n", r.ID(), *prefix, url)
	if *mcpListen != "" {
		stopMCP, err := serveMCP(nc, *mcpListen, *prefix, stdout, log)
		if err != nil {
			r.Stop()
			return err
		}
		defer stopMCP()
	}
	<-ctx.Done()
	log.Info("shutting down: draining work in flight", "deadline", drainTimeout)
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	// The router and the built-in worker drain side by side, to one
	// deadline. A stop by signal is not a failure: what the deadline cut
	// off is logged with its count, and a re-sent batch recovers it
	// through the ledger.
	werr := make(chan error, 1)
	go func() {
		if w != nil {
			werr <- w.Drain(dctx)
			return
		}
		werr <- nil
	}()
	if err := r.Drain(dctx); err != nil {
		log.Warn("router drain deadline passed", "err", err)
	}
	if err := <-werr; err != nil {
		log.Warn("built-in tools: drain deadline passed", "err", err)
	}
	return nil
}

// drainTimeout bounds the drain on shutdown.
const drainTimeout = 30 * time.Second

// dirList is a repeatable flag of directories.
type dirList []string

func (d *dirList) String() string { return strings.Join(*d, ",") }

func (d *dirList) Set(v string) error {
	if fi, err := os.Stat(v); err != nil || !fi.IsDir() {
		return fmt.Errorf("%q is not a directory", v)
	}
	*d = append(*d, v)
	return nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
