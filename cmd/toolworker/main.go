// Command toolworker runs a toolbus worker that serves a few example tools:
// word_count, slow_echo and append_note. Start several copies and they share
// the load through their per-tool queue groups.
//
//	toolworker --nats nats://127.0.0.1:4222
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/builtin"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/cli/daemon"
	"github.com/toolbus/toolbus/internal/memtune"
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
	observe := daemon.ObserveFlags(fs)
	fs.Usage = cli.GroupedUsage(fs, fmt.Sprintf("usage: toolworker [flags]\n\nServes the example tools %s on a toolbus deployment.\n", strings.Join(toolNames, ", ")), nil, "")
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
	defer obs.Stop(context.WithoutCancel(ctx)) // flushes even after a signal ended ctx (a second one exits at once)
	log := obs.Log
	// Tuned as the router is (docs/worker.md, "The collector").
	gc := memtune.Apply(memtune.DefaultGCPercent, memtune.DefaultMemoryLimit)
	log.Debug("collector", "gc_percent", gc.GCPercent, "memory_limit", gc.MemoryLimit, "from_env", gc.FromEnv)

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
		dctx, cancel := context.WithTimeout(context.Background(), daemon.DrainTimeout)
		defer cancel()
		_ = b.Stop(dctx)
	}, nil
}

// registerBuiltin adds the built-in tools to w; with a workdir, skills'
// scripts are materialized privately, and stop removes them.
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
		// A fresh private directory under the user cache directory (the temp directory for a shell user of its own).
		m, err := builtin.SkillsMaterializer(cat, "", "toolworker-"+cmp.Or(id, w.ID())+"-", cfg)
		if err != nil {
			_ = cat.Drain(context.WithoutCancel(ctx))
			return nil, err
		}
		cfg.Skills, stop = m, func() { _ = cat.Drain(context.WithoutCancel(ctx)); _ = m.Close() }
	}
	if err := builtin.RegisterWith(ctx, w, cfg); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// toolNames lists the example tools in registration order; the effect
// tools only when $TOOLWORKER_EFFECTS_FILE names their record file.
var toolNames = append([]string{"word_count", "slow_echo", "append_note", "big_text"}, effectToolNames()...)

// Effect tools, for toolbus soak: each run appends a JSON line to
// $TOOLWORKER_EFFECTS_FILE; without it they are not served.
const (
	effectsEnv          = "TOOLWORKER_EFFECTS_FILE"
	recordEffect        = "record_effect"         // runs at once (permission allow)
	recordEffectConfirm = "record_effect_confirm" // asks for a confirmation first (permission ask)
	recordEffectDurable = "record_effect_durable" // durable: through the work queue, idempotent by call key
)

func effectToolNames() []string {
	if os.Getenv(effectsEnv) == "" {
		return nil
	}
	return []string{recordEffect, recordEffectConfirm, recordEffectDurable}
}

// RecordEffectIn is the input of the effect tools.
type RecordEffectIn struct {
	Tag      string `json:"tag,omitempty" jsonschema:"description=Any text, copied into the record"`
	BeforeMS int    `json:"before_ms,omitempty" jsonschema:"minimum=0,maximum=10000,description=Milliseconds to wait before recording"`
	AfterMS  int    `json:"after_ms,omitempty" jsonschema:"minimum=0,maximum=10000,description=Milliseconds to wait after recording, before answering"`
}

// EffectRecord is one line of the effects file: one execution of a call.
type EffectRecord struct {
	Tool    string `json:"tool"`
	Key     string `json:"key"` // <session>.<reply id>.<call id>
	Attempt int    `json:"attempt"`
	PID     int    `json:"pid"`
	Tag     string `json:"tag,omitempty"`
	// Repeat marks a durable call's run after its effect had already
	// happened (a redelivery): the run did nothing but answer again.
	Repeat bool   `json:"repeat,omitempty"`
	At     string `json:"at"`
}

// effects appends EffectRecords to a file, one write each so processes do not
// mix; the durable tool's effect is an exclusive marker file per call key
// (idempotent, protocol.md 5.8).
type effects struct {
	f   *os.File
	dir string
}

// record appends the record of one execution of c; once it returns nil the
// side effect has happened (it survives a kill of this process).
func (e *effects) record(c *worker.Call, in RecordEffectIn) error {
	key := bus.CallKey(c.SessionID, c.ReplyID, c.ID)
	repeat := false
	if c.Name == recordEffectDurable {
		m, err := os.OpenFile(filepath.Join(e.dir, key), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		switch {
		case errors.Is(err, fs.ErrExist):
			repeat = true
		case err != nil:
			return err
		default:
			m.Close()
		}
	}
	line, err := json.Marshal(EffectRecord{Tool: c.Name, Key: key, Attempt: c.Attempt, PID: os.Getpid(),
		Tag: in.Tag, Repeat: repeat, At: time.Now().UTC().Format(time.RFC3339Nano)})
	if err != nil {
		return err
	}
	_, err = e.f.Write(append(line, '\n'))
	return err
}

// registerEffects adds the effect tools when $TOOLWORKER_EFFECTS_FILE is set.
func registerEffects(w *worker.Worker) error {
	path := os.Getenv(effectsEnv)
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("$%s: %w", effectsEnv, err)
	}
	e := &effects{f: f, dir: path + ".d"}
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		return fmt.Errorf("$%s: %w", effectsEnv, err)
	}
	// The waits widen the windows a kill can hit: before the effect (the
	// call never ran) and after it (it ran, but its result is lost).
	wait := func(ctx context.Context, ms int) error {
		if bus.Sleep(ctx, time.Duration(ms)*time.Millisecond) != nil {
			return context.Cause(ctx)
		}
		return nil
	}
	run := func(ctx context.Context, c *worker.Call, in RecordEffectIn) (string, error) {
		if err := wait(ctx, in.BeforeMS); err != nil {
			return "", fmt.Errorf("%s stopped before recording %s: %w", c.Name, c.ID, err)
		}
		if err := e.record(c, in); err != nil {
			return "", fmt.Errorf("%s did not record %s: %w", c.Name, c.ID, err)
		}
		if err := wait(ctx, in.AfterMS); err != nil {
			return "", fmt.Errorf("%s recorded %s, then stopped: %w", c.Name, c.ID, err)
		}
		return "recorded " + c.ID, nil
	}
	for _, d := range []struct {
		name, desc string
		perm       string
		durable    bool
		timeoutMS  int64
	}{
		{recordEffect, "Record one execution of this call in the effects file (a countable side effect).", bus.PermissionAllow, false, 10000},
		{recordEffectConfirm, "Record one execution of this call in the effects file, after a person confirms it.", bus.PermissionAsk, false, 10000},
		// Long enough for a redelivery after the work consumer's ack_wait.
		{recordEffectDurable, "Record this call in the effects file once, however often it is delivered (a durable tool).", bus.PermissionAllow, true, 45000},
	} {
		if err := worker.Register(w, bus.ToolDef{Name: d.name, Description: d.desc, ConcurrencySafe: true,
			Permission: d.perm, Durable: d.durable, TimeoutMS: d.timeoutMS}, run); err != nil {
			return err
		}
	}
	return nil
}

// WordCountIn is the input of word_count.
type WordCountIn struct {
	Text string `json:"text" jsonschema:"description=The text whose words are counted"`
}

// WordCountOut is the output of word_count.
type WordCountOut struct {
	Words int `json:"words"`
}

// BigTextIn is the input of big_text.
type BigTextIn struct {
	KiB int `json:"kib" jsonschema:"minimum=1,maximum=16384,description=Size of the text in KiB (1024 bytes)"`
}

// bigText is kib KiB of numbered lines, large enough to be offloaded (to try
// toolbus fetch).
func bigText(_ context.Context, _ *worker.Call, in BigTextIn) (string, error) {
	if in.KiB < 1 || in.KiB > 16384 {
		return "", fmt.Errorf("kib must be 1..16384, got %d", in.KiB)
	}
	var b strings.Builder
	b.Grow(in.KiB * 1024)
	for i := 0; b.Len() < in.KiB*1024; i++ {
		fmt.Fprintf(&b, "line %08d of big_text\n", i)
	}
	return b.String()[:in.KiB*1024], nil
}

// SlowEchoIn is the input of slow_echo.
type SlowEchoIn struct {
	Text string `json:"text" jsonschema:"description=The text to send back"`
	MS   int    `json:"ms" jsonschema:"minimum=0,maximum=120000,description=How long to wait in milliseconds before answering"`
}

// AppendNoteIn is the input of append_note.
type AppendNoteIn struct {
	Note string `json:"note" jsonschema:"description=The note to store"`
}

// AppendNoteOut is the output of append_note.
type AppendNoteOut struct {
	Count int `json:"count"`
}

// progressEvery is how often slow_echo reports progress.
const progressEvery = 100 * time.Millisecond

// notes is the in-memory note list of one worker process.
type notes struct {
	mu   sync.Mutex
	list []string
}

// add appends n and returns how many notes there are.
func (ns *notes) add(n string) int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	ns.list = append(ns.list, n)
	return len(ns.list)
}

// register adds the example tools to w; append_note stores into ns and,
// when notesGroup is set, belongs to that group instead of basic.
func register(w *worker.Worker, ns *notes, notesGroup string) error {
	// append_note writes (never run twice) but allows itself: it is harmless.
	var groups []string
	if notesGroup != "" {
		groups = []string{notesGroup}
	}
	return errors.Join(
		worker.Register(w, bus.ToolDef{Name: "word_count",
			Description: "Count the words of a text (runs of characters separated by white space).",
			ReadOnly:    true, ConcurrencySafe: true, Idempotent: true, MaxAttempts: 2, TimeoutMS: 5000},
			func(_ context.Context, _ *worker.Call, in WordCountIn) (WordCountOut, error) {
				return WordCountOut{Words: len(strings.Fields(in.Text))}, nil
			}),
		worker.Register(w, bus.ToolDef{Name: "slow_echo",
			Description: "Wait the given number of milliseconds, reporting progress every 100 ms, then send the text back.",
			ReadOnly:    true, ConcurrencySafe: true, Idempotent: true},
			slowEcho),
		worker.Register(w, bus.ToolDef{Name: "big_text",
			Description: "Return a text of the given size in KiB (numbered lines); above 1 MiB it comes back as a nats-object:// reference for toolbus fetch.",
			ReadOnly:    true, ConcurrencySafe: true, Idempotent: true},
			bigText),
		worker.Register(w, bus.ToolDef{Name: "append_note",
			Description: "Append a note to this worker's in-memory list and return how many notes it holds.",
			ReadOnly:    false, ConcurrencySafe: false, Idempotent: false, Permission: bus.PermissionAllow, Groups: groups},
			func(_ context.Context, _ *worker.Call, in AppendNoteIn) (AppendNoteOut, error) {
				return AppendNoteOut{Count: ns.add(in.Note)}, nil
			}),
		registerEffects(w))
}

// slowEcho sleeps in.MS milliseconds, emitting a progress event every
// progressEvery, and returns in.Text; it stops early with ctx's error.
func slowEcho(ctx context.Context, c *worker.Call, in SlowEchoIn) (string, error) {
	total := time.Duration(in.MS) * time.Millisecond
	done := time.After(total)
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("slow_echo stopped after %v: %w", time.Since(start).Round(time.Millisecond), context.Cause(ctx))
		case <-done:
			return in.Text, nil
		case <-tick.C:
			elapsed := min(time.Since(start), total).Round(time.Millisecond)
			_ = c.Progress(bus.Text(fmt.Sprintf("waited %v of %v", elapsed, total))...)
		}
	}
}
