// Command toolworker runs a toolbus worker that serves a few example tools:
// word_count, slow_echo and append_note. Start several copies and they share
// the load through their per-tool queue groups.
//
//	toolworker --nats nats://127.0.0.1:4222
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/mcp/bridge"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/skills"
	"github.com/toolbus/toolbus/worker"
)

func main() {
	builtin.RunSandboxChild() // the shell's sandbox launcher runs here, never returning
	cli.Main("toolworker", run)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.FlagSet("toolworker", args, stdout, stderr)
	conn := natsconn.FromEnv()
	conn.RegisterFlags(fs)
	prefix := fs.String("prefix", bus.DefaultPrefix, "subject prefix of the deployment")
	id := fs.String("id", "", "worker instance id (default: random)")
	heartbeat := fs.Duration("heartbeat", bus.DefaultHeartbeat, "registration heartbeat interval; must match the routers'")
	maxConcurrent := fs.Int("max-concurrent", 64, "calls this worker runs at once, across all its tools")
	notesGroup := fs.String("notes-group", "", "put append_note in this tool group instead of basic (define the group on the routers, e.g. examples/skills/router.yaml)")
	withBuiltin := fs.Bool("builtin", false, "also serve the built-in tools (get_current_time, echo, todo_write; with --workdir the file tools and shell)")
	workdir := fs.String("workdir", "", "with --builtin: base directory of the file tools and shell; empty serves neither. With --mcp-config: the bridged servers' roots")
	builtinFlags := builtin.RegisterFlags(fs, "toolworker", "with --builtin: ")
	mcpConfig := fs.String("mcp-config", "", "also bridge the MCP servers listed in this YAML or JSON file (docs/mcp.md)")
	demo := fs.Bool("demo", true, "serve the example tools (off by default with --mcp-config, so bridged servers stand alone)")
	observe := cli.ObserveFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: toolworker [flags]\n\nServes the example tools %s on a toolbus deployment.\n\nflags:\n", strings.Join(toolNames, ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *maxConcurrent < 1 {
		return fmt.Errorf("--max-concurrent must be at least 1, got %d", *maxConcurrent)
	}
	if *id != "" && !bus.ValidID(*id) {
		return fmt.Errorf("--id %q must match ^[A-Za-z0-9_-]{1,128}$", *id)
	}
	if *heartbeat <= 0 {
		return fmt.Errorf("--heartbeat must be positive, got %v", *heartbeat)
	}
	obs, err := observe.Start(ctx, "toolworker", "toolbus-worker", stdout, stderr)
	if err != nil {
		return err
	}
	defer obs.Stop()
	log := obs.Log

	if *mcpConfig != "" && !cli.Given(fs, "demo") {
		*demo = false
	}
	if !*demo && !*withBuiltin && *mcpConfig == "" {
		return errors.New("nothing to serve: --demo=false without --builtin or --mcp-config")
	}
	nc, err := conn.ConnectWait(ctx, "toolbus-worker", log, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()

	w, err := worker.New(nc, worker.Config{ID: *id, Prefix: *prefix, Heartbeat: *heartbeat,
		MaxConcurrent: *maxConcurrent, Logger: log, Observer: obs.WorkerObserver(*maxConcurrent)})
	if err != nil {
		return err
	}
	if *notesGroup != "" && !bus.ValidName(*notesGroup) {
		return fmt.Errorf("--notes-group %q must match ^[A-Za-z0-9_-]{1,64}$", *notesGroup)
	}
	var names []string
	if *demo {
		if err := register(w, &notes{}, *notesGroup); err != nil {
			return err
		}
		names = toolNames
	}
	if *withBuiltin {
		stop, err := registerBuiltin(ctx, nc, w, *prefix, *id, *workdir, builtinFlags.Config(*workdir, log))
		if err != nil {
			return err
		}
		defer stop()
		names = append(slices.Clone(names), "built-in tools")
	} else if builtinFlags.ShellSet() || *workdir != "" && *mcpConfig == "" {
		return fmt.Errorf("--workdir, --shell-allow, --shell-trust, --shell-env, --shell-user and --shell-as-root need --builtin (--workdir also works with --mcp-config)")
	}
	if *mcpConfig != "" {
		stop, err := startBridge(ctx, nc, *mcpConfig, *prefix, *id, *workdir, *heartbeat, *maxConcurrent, log)
		if err != nil {
			return err
		}
		defer stop()
		names = append(slices.Clone(names), "MCP servers of "+*mcpConfig)
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "toolworker: worker %s serving %s on %s (prefix %q)\n",
		w.ID(), strings.Join(names, ", "), natsconn.Redact(conn.Servers()), *prefix)
	select {
	case <-w.Registered():
		log.Info("registered with the routers")
	case <-ctx.Done():
	}
	obs.Drain(ctx, map[string]func(context.Context) error{"worker": w.Drain})
	return nil
}

// startBridge connects the MCP servers of the config file; each gets a
// worker of its own (<id>-<server>-<n>). stop withdraws their tools.
// The bridged servers' roots are the workdir unless configured per server.
func startBridge(ctx context.Context, nc *nats.Conn, path, prefix, id, workdir string, heartbeat time.Duration, maxConcurrent int, log *slog.Logger) (stop func(), err error) {
	f, err := bridge.Load(path)
	if err != nil {
		return nil, err
	}
	var roots []string
	if workdir != "" {
		roots = []string{workdir}
	}
	b, err := bridge.New(nc, f, bridge.Config{ID: id, Prefix: prefix, Heartbeat: heartbeat, MaxConcurrent: maxConcurrent, Roots: roots, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := b.Start(ctx); err != nil {
		return nil, err
	}
	return func() {
		dctx, cancel := context.WithTimeout(context.Background(), cli.DrainTimeout)
		defer cancel()
		_ = b.Stop(dctx)
	}, nil
}

// registerBuiltin adds the built-in tools to w. With a workdir, shell runs
// skills' scripts from the P_skills object store, materialized in a fresh
// private directory under the user cache directory; stop ends the object
// store's watch and removes that directory.
func registerBuiltin(ctx context.Context, nc *nats.Conn, w *worker.Worker, prefix, id, workdir string, cfg builtin.Config) (stop func(), err error) {
	cfg.WorkDir = workdir
	stop = func() {}
	if workdir != "" {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		// Opened, not created: the routers create it with the deployment's replicas.
		bucket := bus.NewSubjects(prefix).ObjectStore(bus.ObjectSkills)
		obj, err := js.ObjectStore(ctx, bucket)
		if err != nil {
			return nil, fmt.Errorf("skills object store %s (start a router first): %w", bucket, err)
		}
		cat := skills.NewCatalogue(skills.Config{Objects: obj})
		if err := cat.Start(ctx); err != nil {
			return nil, err
		}
		// A fresh private directory under the user cache directory.
		m, err := builtin.SkillsMaterializer(cat, "", "toolworker-"+cmp.Or(id, w.ID())+"-", cfg)
		if err != nil {
			_ = cat.Drain(context.WithoutCancel(ctx))
			return nil, err
		}
		cfg.Skills, stop = m, func() { _ = cat.Drain(context.WithoutCancel(ctx)); _ = m.Close() }
	}
	if err := builtin.RegisterWith(w, cfg); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}
