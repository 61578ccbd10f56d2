// Command router runs a toolbus router. With no --nats URL it starts an
// embedded nats-server with JetStream, so one command gives a working bus.
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/cli/daemon"
	"github.com/toolbus/toolbus/internal/life"
	"github.com/toolbus/toolbus/internal/memtune"
	"github.com/toolbus/toolbus/internal/private"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/security"
	"github.com/toolbus/toolbus/skills"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

func main() {
	builtin.RunSandboxChild() // the shell's sandbox launcher runs here, never returning
	cli.Main("router", run)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.FlagSet("router", args, stdout, stderr)
	natsURL := fs.String("nats", "", "NATS server URL to join; empty starts an embedded nats-server with JetStream")
	listen := fs.String("listen", "127.0.0.1:4222", "host:port of the embedded nats-server")
	data := fs.String("data", "", "JetStream store directory of the embedded server (default: a private directory per listen address under the user's cache directory, toolbus/data-<listen>)")
	natsConfig := fs.String("nats-config", "", "nats-server configuration file for the embedded server (users, permissions, TLS); log in with --nkey, --creds, --user ...")
	secure := fs.String("secure", "", "DIR: start the embedded server with the toolbus roles' users (docs/security.md): DIR/nats-server.conf, generated with an nkey seed and .env file per role unless it exists")
	refuseShared := fs.Bool("refuse-shared-register", false, "refuse registrations on P.register, the one subject of protocol 1.11 (workers of 1.12 register each tool on P.register.<tool>): set it where NATS permissions confine workers (docs/security.md); on with --secure, unless the directory's spec.json lets workers publish there (worker_shared_register, the upgrade window)")
	var registerRate softBound
	fs.Var(&registerRate, "register-rate", "bytes of registrations a second this router reads from one NATS account (a tool runner's login), after a burst of 8 seconds of them; past it a registration is refused limit_exceeded unread (docs/registry.md); off: no bound (default 4MiB)")
	identities := fs.String("identities", "", "FILE: bind sessions to users by their credentials (a users.json, or {\"sessions\": {\"s1\": \"alice\"}, \"agents\": [\"s2\"]}: agents names sessions with a login of their own bound to no user), reread when it changes; --secure uses DIR/users.json (docs/security.md)")
	conn := natsconn.FromEnv()
	conn.URLs = "" // the router joins only what --nats names
	conn.RegisterAuthFlags(fs)
	prefix := fs.String("prefix", bus.DefaultPrefix, "subject prefix of the deployment")
	withBuiltin := fs.Bool("builtin", true, "serve the built-in tools in-process")
	replicas := fs.Int("replicas", 1, "JetStream replicas of buckets and streams")
	workAckWait := fs.Duration("work-ack-wait", store.DefaultWorkAckWait, "how long a durable call's worker may go silent before the call goes to another worker")
	maxCalls := fs.Int("max-calls", bus.MaxCalls, "most calls in one batch")
	maxInput := fs.Int("max-input-bytes", router.DefaultMaxInputBytes, "most bytes of one call's input")
	maxParked := fs.Int("max-parked", router.DefaultMaxParked, "most calls one session may have waiting for an answer")
	sessionShare := fs.Int("max-session-inflight", 0, "most batches and tools queries of one session the router handles at once; past it busy (0: an eighth of its 4096 slots, 512; -1: no share)")
	sessionCache := fs.Int("session-cache", 0, "sessions kept decoded in memory (0: 10000); each batch reads its session from KV anyway")
	readOutput := fs.Bool("read-output", false, "offer the built-in read_output: a model reads a byte or line range of its session's stored outputs (docs/protocol.md 11)")
	eventsMemory := fs.Bool("events-memory", false, "keep the session events stream in memory (parked calls, sessions and the ledger stay on disk); only for a new deployment")
	heartbeat := fs.Duration("heartbeat", bus.DefaultHeartbeat, "worker heartbeat interval")
	lease := fs.Duration("lease", 0, "how long a router's claim on a call lives without renewal (renewed every heartbeat); 0 means three heartbeats")
	id := fs.String("id", "", "router instance id (default: random)")
	configPath := fs.String("config", "", "router config file (YAML or JSON): groups, default permissions, park_ttl")
	workdir := fs.String("workdir", "", "base directory of the built-in file tools and shell; empty serves neither")
	builtinFlags := builtin.RegisterFlags(fs, "router", "")
	mcpOpts := mcpFlags(fs)
	inboxOpts := inboxFlags(fs)
	var skillDirs []string
	fs.Func("skills", "a skill folder, or a folder of skill folders, to serve (repeatable; a later one wins on a name clash, the P_skills object store over all)", func(v string) error {
		if fi, err := os.Stat(v); err != nil || !fi.IsDir() {
			return fmt.Errorf("%q is not a directory", v)
		}
		skillDirs = append(skillDirs, v)
		return nil
	})
	skillViewer := fs.Bool("skill-viewer", false, "also offer AgentScope's Skill viewer tool (input {\"skill\": name}, answers the SKILL.md body) beside load_skill_through_path")
	limitsFlags := limitFlags(fs)
	gcPercent := fs.Int("gc-percent", memtune.DefaultGCPercent, "the collector's GOGC unless the environment sets GOGC (docs/operations.md)")
	memLimit := fs.Int64("memory-limit-mib", memtune.DefaultMemoryLimit>>20, "soft memory limit in MiB unless the environment sets GOMEMLIMIT; 0: none (docs/operations.md)")
	observe := daemon.ObserveFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := mcpOpts.check(); err != nil {
		return err
	}
	obs, err := observe.Start(ctx, "toolbus", "toolbus-router", stdout, stderr)
	if err != nil {
		return err
	}
	defer obs.Stop(context.WithoutCancel(ctx)) // flushes even after a signal ended ctx (a second one exits at once)
	log, reg := obs.Log, obs.Metrics
	gc := memtune.Apply(*gcPercent, *memLimit<<20)
	log.Debug("collector", "gc_percent", gc.GCPercent, "memory_limit", gc.MemoryLimit, "from_env", gc.FromEnv)
	fileCfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	limits := fileCfg.Limits.override(limitsFlags)
	storeCfg := store.Config{Replicas: *replicas, Heartbeat: *heartbeat, EventsMemory: *eventsMemory, WorkAckWait: *workAckWait}
	limits.apply(&storeCfg)
	storeCfg.MCPRefusals = new(store.Refusals) // the facade's, in the router's P_mcp row
	mcpOpts.maxBytes, mcpOpts.refusals = storeCfg.MCPMaxBytes, storeCfg.MCPRefusals

	if *maxCalls > bus.MaxCancelCalls { // a cancel names at most that many (3.5): one of a larger batch would be cut
		return fmt.Errorf("--max-calls %d: at most %d", *maxCalls, bus.MaxCancelCalls)
	}
	url := *natsURL
	if *secure != "" {
		if url != "" || *natsConfig != "" {
			return errors.New("--secure starts the embedded server with generated users; it goes with neither --nats nor --nats-config")
		}
		if *natsConfig, err = secureDir(*secure, *prefix, *listen, stdout); err != nil {
			return err
		}
		if *identities != "" {
			return errors.New("--secure binds sessions with DIR/users.json; it goes without --identities")
		}
		*identities = filepath.Join(*secure, security.UsersFile)
		conn.Creds, conn.User, conn.Password, conn.Token = "", "", "", ""
		conn.NKey, conn.InboxPrefix = security.SeedFile(*secure, security.RoleRouter), ""
	}
	var bindings *security.Bindings
	if *identities != "" {
		if bindings, err = security.LoadBindings(*identities); err != nil {
			return err
		}
	}
	var reload func() error // the embedded server's, under --secure
	if url == "" {
		dir, err := storeDir(*data, *listen)
		if err != nil {
			return err
		}
		unlock, err := lockStore(dir, *listen) // refused: most often a router runs here, whose server a second one joins
		if err != nil {
			return err
		}
		defer unlock()
		s, err := embedded.Start(embedded.Config{Listen: *listen, StoreDir: dir, ConfigFile: *natsConfig})
		if err != nil {
			return err
		}
		if *secure != "" {
			reload = func() error { return reloadServer(s, *natsConfig, *listen, dir) }
		}
		defer func() {
			s.Shutdown()
			s.WaitForShutdown()
		}()
		url = s.ClientURL()
		fmt.Fprintf(stdout, "toolbus: embedded NATS listening on %s (JetStream store %s)\n", url, dir)
	}
	// Workers of a secured deployment send results to RouterInbox; harmless elsewhere.
	conn.URLs, conn.InboxPrefix = url, cmp.Or(conn.InboxPrefix, security.RouterInbox)
	nc, err := conn.ConnectWait(ctx, "toolbus-router", log, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()

	var ids router.Identities
	if bindings != nil {
		ids = bindings
		go watchIdentities(ctx, *identities, bindings, reload, identitiesPoll, log)
	}
	r, err := router.New(nc, router.Config{ID: *id, Prefix: *prefix, Logger: log, Identities: ids, MaxSessionInflight: *sessionShare,
		RefuseSharedRegister: *refuseShared || *secure != "" && !sharedRegister(*secure),
		Store:                storeCfg,
		SessionCache:         *sessionCache,
		Limits:               router.Limits{MaxCalls: *maxCalls, MaxInputBytes: *maxInput, MaxParked: *maxParked, MaxOutput: int64(limits.MaxOutput)},
		Groups:               fileCfg.Groups, DefaultMode: fileCfg.Permissions.Mode, DefaultRules: fileCfg.Permissions.Rules,
		DefaultWorkDirs: fileCfg.Permissions.WorkDirs, ParkTTL: time.Duration(fileCfg.ParkTTL), Metrics: reg, Skills: skillDirs, SkillViewer: *skillViewer, Lease: *lease, RegisterRate: int64(registerRate),
		Guard: router.Guard{Search: fileCfg.Search.Enabled, ReadOutput: *readOutput, Pinned: fileCfg.Search.Pinned, Limits: fileCfg.Quotas.Policy, Cache: fileCfg.Cache.Enabled, CacheMaxBytes: int64(fileCfg.Cache.MaxBytes), Audit: fileCfg.Audit.config()}})
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	var w *worker.Worker
	if *withBuiltin {
		// The built-in worker needs its own connection: the router answers
		// no reply subject under its own inbox prefix. It logs in as the
		// router with the inbox prefix "<router's>-builtin" (a secured router
		// user may use _INBOX.>).
		bconn := conn
		bconn.InboxPrefix = strings.TrimSuffix(conn.InboxPrefix, ".") + "-builtin"
		bnc, err := bconn.Connect("toolbus-router-builtin", nats.MaxReconnects(-1))
		if err == nil {
			defer bnc.Close()
			w, err = worker.New(bnc, worker.Config{Prefix: *prefix, Heartbeat: *heartbeat, Logger: log, Observer: obs.WorkerObserver(0),
				InlineLimit: int(limits.InlineOutput), MaxOutput: int64(limits.MaxOutput)})
		}
		if err == nil {
			cfg := builtinFlags.Config(*workdir, log)
			if *workdir != "" {
				var m *skills.Materializer
				parent := "" // DATA/skills, or the user cache directory without --data (the temp directory for a shell user of its own)
				if *data != "" {
					parent = filepath.Join(*data, "skills")
				}
				if m, err = builtin.SkillsMaterializer(r.Skills(), parent, "router-"+r.ID()+"-", cfg); err == nil {
					defer m.Close()
					cfg.Skills = m
				}
			}
			if err == nil {
				err = builtin.RegisterWith(ctx, w, cfg)
			}
			if err == nil {
				err = builtin.RegisterTasks(w, bnc, *prefix) // the background task tools (docs/tasks.md)
			}
		}
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			_ = r.Stop(context.WithoutCancel(ctx))
			return fmt.Errorf("built-in tools: %w", err)
		}
	}
	fmt.Fprintf(stdout, "toolbus: router %s serving prefix %q on %s\n", r.ID(), *prefix, natsconn.Redact(url))
	// Names the configuration gives that match nothing now: a typo, or a
	// worker not started yet (toolbus status shows them as they are).
	for _, w := range r.Unknown() {
		fmt.Fprintf(stdout, "toolbus: warning: %s (now; `toolbus status` shows the current list)\n", w)
	}
	// The MCP facade and the approval inbox act with logins of their own,
	// never the router's.
	for _, serve := range []func(context.Context, natsconn.Config, string, string, io.Writer, *slog.Logger) (func(), error){mcpOpts.serve, inboxOpts.serve} {
		stop, err := serve(ctx, conn, *secure, *prefix, stdout, log)
		if err != nil {
			_ = r.Stop(context.WithoutCancel(ctx))
			return err
		}
		if stop != nil {
			defer stop()
		}
	}
	drains := map[string]func(context.Context) error{"router": r.Drain}
	if w != nil {
		drains["built-in tools"] = w.Drain
	}
	obs.Drain(ctx, drains)
	return nil
}

// secureDir makes --secure dir private (secureMode) and returns its server
// configuration, generating the roles' users when there are none, and says
// where each role's credentials are.
func secureDir(dir, prefix, listen string, stdout io.Writer) (string, error) {
	if err := secureMode(dir, stdout); err != nil {
		return "", err
	}
	cfgFile := filepath.Join(dir, security.ServerConfigFile)
	if _, err := os.Stat(cfgFile); err == nil {
		if refreshed, err := security.Refresh(dir); err != nil {
			return "", fmt.Errorf("--secure %s: %w", dir, err)
		} else if refreshed {
			fmt.Fprintf(stdout, "toolbus: updated the permissions in %s to this version's (keys kept)\n", dir)
		}
		fmt.Fprintf(stdout, "toolbus: secured with %s; each role logs in with %s/<role>.nk: run `source %s/<role>.env` (bash, zsh, fish) before its commands\n", cfgFile, dir, dir)
		return cfgFile, nil
	}
	users, err := security.Generate(dir, "nats://"+listen, security.Spec{Prefix: prefix})
	if err != nil {
		return "", err
	}
	names := make([]string, len(users))
	for i, u := range users {
		names[i] = u.Name
	}
	fmt.Fprintf(stdout, "toolbus: generated the users %s in %s: each logs in with %s/<user>.nk and its inbox prefix: run `source %s/<user>.env` (bash, zsh, fish) before its commands\n",
		strings.Join(names, ", "), dir, dir, dir)
	return cfgFile, nil
}

// sharedRegister: the --secure spec lets workers publish on the shared
// P.register (1.12's upgrade window), so its routers serve it.
func sharedRegister(dir string) bool {
	spec, err := security.LoadSpec(dir)
	return err == nil && spec.WorkerSharedRegister
}

// identitiesPoll is how often the router rereads its identities file.
const identitiesPoll = time.Second

// watchIdentities rereads file every poll; on a change it reloads the
// server's configuration, then the bindings, so a session is never bound
// while the shared agent may still publish in it. Failures retry.
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

// storeWhat names the store in the private package's errors.
const storeWhat = "the JetStream store (give --data DIR, or remove it)"

// storeDir makes and returns the JetStream store directory: data, or
// toolbus/data-<listen> under the user cache directory, private
// (docs/security.md); one another user owns or may write is refused.
func storeDir(data, listen string) (string, error) {
	if data != "" {
		return explicitStore(data)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no private default store: %w; give --data DIR", err)
	}
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return "", fmt.Errorf("store: %w", err)
	}
	dir := filepath.Join(cache, "toolbus")
	name := strings.NewReplacer(":", "-", "[", "", "]", "", "/", "-").Replace(listen) // 127.0.0.1-4222
	for _, d := range []string{dir, filepath.Join(dir, "data-"+name)} {
		if err := private.Mkdir(d, 0o077, storeWhat); err != nil {
			return "", fmt.Errorf("store: %w", err)
		}
		dir = d
	}
	return dir, nil
}

// explicitStore makes or checks a --data directory.
func explicitStore(data string) (string, error) {
	if err := os.MkdirAll(data, 0o700); err != nil {
		return "", fmt.Errorf("store %s: %w", data, err)
	}
	real, err := filepath.EvalSymlinks(data)
	if err != nil {
		return "", fmt.Errorf("store %s: %w", data, err)
	}
	if err := cmp.Or(private.Check(real, 0o022, storeWhat), private.Ancestors(real, storeWhat)); err != nil { // the first error
		return "", fmt.Errorf("store: --data %w", err)
	}
	return data, nil
}

// secureMode makes the --secure directory 0700, refusing a link, another
// user's or a writable one; a readable one is tightened, said on out.
func secureMode(dir string, out io.Writer) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("--secure %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("--secure %s: %w", dir, err)
	}
	const what = "the roles' credentials (--secure)"
	if err := cmp.Or(private.Check(dir, 0o022, what), private.Ancestors(dir, what)); err != nil { // the first error
		return fmt.Errorf("refused: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("--secure %s: %w", dir, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("--secure %s: %w", dir, err)
		}
		fmt.Fprintf(out, "toolbus: --secure %s had mode %#o (others could read it); fixed: it is 0700 now\n", dir, perm)
	}
	return private.Check(dir, 0o077, what)
}
