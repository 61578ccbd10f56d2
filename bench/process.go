package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/memtune"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/security"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

// ProcessSpec describes a child process of a harness (the bench's parts,
// the soak's routers and workers).
type ProcessSpec struct {
	Path string
	Args []string
	Env  []string // the whole environment
	// Log receives the process's stdout and stderr; nil discards them (the
	// last lines are kept for errors either way).
	Log io.Writer
	// Ready is called with each line on stdout until it returns ok; its
	// extra is the Process's Extra.
	Ready func(line string) (extra string, ok bool)
	// Bound limits the wait for Ready.
	Bound time.Duration
	// Stdin: Stop closes the process's stdin (its signal to exit) instead
	// of sending SIGTERM.
	Stdin bool
}

// Process is a running child process.
type Process struct {
	Extra string // what Ready returned
	cmd   *exec.Cmd
	stdin io.WriteCloser
	tail  *tail
	done  chan struct{} // closed when the process has exited
}

// StartProcess starts spec and returns once it is ready; a process that
// exits, is not ready within spec.Bound or outlives ctx first fails it
// (and is stopped).
func StartProcess(ctx context.Context, spec ProcessSpec) (*Process, error) {
	p := &Process{cmd: exec.Command(spec.Path, spec.Args...), tail: &tail{out: spec.Log}, done: make(chan struct{})}
	p.cmd.Env, p.cmd.Stderr = spec.Env, p.tail
	stdout, err := p.cmd.StdoutPipe()
	if err == nil && spec.Stdin {
		p.stdin, err = p.cmd.StdinPipe()
	}
	if err == nil {
		err = p.cmd.Start()
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Path, err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		said := false
		for sc.Scan() {
			_, _ = p.tail.Write(append(sc.Bytes(), '\n'))
			if extra, ok := spec.Ready(sc.Text()); ok && !said {
				said = true
				ready <- extra
			}
		}
		_, _ = io.Copy(p.tail, stdout)
		_ = p.cmd.Wait()
		close(p.done)
	}()
	select {
	case p.Extra = <-ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("exited before it was ready: %s", p.tail)
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(spec.Bound):
		err = fmt.Errorf("not ready after %v: %s", spec.Bound, p.tail)
	}
	_ = p.Kill()
	return nil, err
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// State is how the process exited (nil while it runs).
func (p *Process) State() *os.ProcessState {
	select {
	case <-p.done:
		return p.cmd.ProcessState
	default:
		return nil
	}
}

// Tail is the end of what the process wrote.
func (p *Process) Tail() string { return p.tail.String() }

// Kill sends SIGKILL and waits for the process to exit.
func (p *Process) Kill() error {
	err := p.cmd.Process.Signal(syscall.SIGKILL)
	if err == nil {
		<-p.done
	}
	return err
}

// Stop asks the process to exit (closing its stdin, or SIGTERM) and kills
// it when it has not exited before ctx ends. It is safe on a nil Process and
// on one that has exited.
func (p *Process) Stop(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if p.stdin != nil {
		_ = p.stdin.Close()
	} else {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return p.Kill()
	}
}

// tail keeps the last bytes a process wrote, for error messages.
type tail struct {
	mu  sync.Mutex
	buf []byte
	out io.Writer // also copied here when set
}

const tailBytes = 4096

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailBytes {
		t.buf = t.buf[len(t.buf)-tailBytes:]
	}
	if t.out != nil {
		_, _ = t.out.Write(p)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// The bench re-executes its own binary once per part: the
// child reads its part from these variables, prints childReady on stdout once
// it serves, and exits when its stdin closes.
const (
	envChild = "TOOLBUS_BENCH_CHILD" // the role: one of the role* constants
	envURL   = "TOOLBUS_BENCH_URL"   // the nats-server to join (every role but roleNATS)
	envDir   = "TOOLBUS_BENCH_DIR"   // roleNATS: the JetStream store directory
	// envProfiles lists the only files the router may write profiles to:
	// the control subject is open to any client, so a request names one.
	envProfiles = "TOOLBUS_BENCH_PROFILES"
	// envTrace names a directory where each child writes an execution
	// trace of its whole life, with CPU samples, to <role>.trace
	// (docs/performance.md, "Session 26").
	envTrace   = "TOOLBUS_BENCH_TRACE"
	childReady = "ready"
)

// ctlSubject is a child's control subject (outside every toolbus prefix): an
// empty request (or {"gc": true}) answers childStats; the router's takes
// {"profile": "FILE"} and {"profile": ""} too.
func ctlSubject(role string) string { return "benchctl." + role }

type ctlRequest struct {
	GC      bool    `json:"gc,omitempty"`      // collect and return memory to the OS before reading RSS
	Profile *string `json:"profile,omitempty"` // start (a path) or stop ("") a CPU profile
}

// childStats is a process's own view of its costs so far.
type childStats struct {
	CPUNS     int64  `json:"cpu_ns"` // user + system, getrusage(RUSAGE_SELF)
	Mallocs   uint64 `json:"mallocs"`
	HeapInuse uint64 `json:"heap_inuse"`
	RSSKB     int64  `json:"rss_kb"`
	HWMKB     int64  `json:"hwm_kb"` // peak RSS
	NumGC     uint32 `json:"num_gc"`
	Writes    int64  `json:"writes"` // write system calls (Linux; -1 elsewhere)
	Err       string `json:"err,omitempty"`
}

// readStats reads this process's costs, after a GC that returns freed
// memory to the OS when gc.
func readStats(gc bool) childStats {
	if gc {
		runtime.GC()
		debug.FreeOSMemory()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru) // zero CPU where it fails
	rss, hwm, writes := procSelf()
	return childStats{CPUNS: ru.Utime.Nano() + ru.Stime.Nano(), Mallocs: ms.Mallocs, HeapInuse: ms.HeapInuse, RSSKB: rss, HWMKB: hwm, NumGC: ms.NumGC, Writes: writes}
}

// RunChild runs this process as a part of the bench when
// TOOLBUS_BENCH_CHILD is set, and never returns then. Call it first in main
// (and in TestMain of tests that run Run).
func RunChild() {
	role := os.Getenv(envChild)
	if role == "" {
		return
	}
	if err := runChild(role, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "bench child %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runChild starts role, says childReady on out, and serves until in
// closes or a signal arrives.
func runChild(role string, in io.Reader, out io.Writer) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	go func() { // the parent closes stdin (or dies): stop
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()
	if dir := os.Getenv(envTrace); dir != "" {
		f, err := os.Create(filepath.Join(dir, role+".trace"))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
		// CPU samples land in the trace, with their goroutine (a
		// --cpuprofile then fails: one CPU profile at a time).
		if err := pprof.StartCPUProfile(io.Discard); err == nil {
			defer pprof.StopCPUProfile()
		}
	}
	url := os.Getenv(envURL)
	if role == roleNATS {
		s, err := embedded.Start(embedded.Config{MaxStore: embedded.Roomy, StoreDir: os.Getenv(envDir)})
		if err != nil {
			return err
		}
		url = s.ClientURL()
		defer func() { s.Shutdown(); s.WaitForShutdown() }()
	}
	// The router serves on the control connection (as cmd/router, one
	// connection); the other roles open their own for their traffic.
	nc, err := serveControl(url, role)
	if err != nil {
		return err
	}
	defer nc.Close()
	extra := url
	if role != roleNATS {
		var stop func(context.Context)
		if stop, extra, err = startPart(ctx, role, url, nc); err != nil {
			return err
		}
		defer stop(ctx)
	}
	fmt.Fprintln(out, childReady, extra)
	<-ctx.Done()
	return nil
}

// startPart starts role (but nats-server) on the server at url; stop
// undoes it, extra goes on the ready line. The router serves on nc.
func startPart(ctx context.Context, role, url string, nc *nats.Conn) (stop func(context.Context), extra string, err error) {
	switch role {
	case roleRouter:
		stop, err = childRouter(ctx, nc)
	case roleRelay:
		stop, err = childRelay(ctx, url)
	case roleResponder:
		stop, err = childResponder(ctx, url)
	case roleWorker:
		stop, err = childWorker(ctx, url)
	case roleMCP:
		m := &mcpHTTP{}
		extra, err = m.serve()
		stop = m.close
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	return stop, extra, err
}

// serveControl connects to url and answers the role's control subject.
func serveControl(url, role string) (*nats.Conn, error) {
	nc, err := childConnect(url, role)
	if err != nil {
		return nil, err
	}
	prof := profiler{allowed: filepath.SplitList(os.Getenv(envProfiles))}
	_, err = nc.Subscribe(ctlSubject(role), func(m *nats.Msg) {
		var req ctlRequest
		if len(m.Data) > 0 {
			if err := json.Unmarshal(m.Data, &req); err != nil {
				_ = m.Respond([]byte(`{"err":"bad control request"}`))
				return
			}
		}
		var st childStats
		if req.Profile != nil {
			if err := prof.toggle(*req.Profile); err != nil {
				st.Err = err.Error()
			}
		}
		if st.Err == "" {
			st = readStats(req.GC)
		}
		b, _ := json.Marshal(st)
		_ = m.Respond(b)
	})
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// profiler writes one CPU profile at a time to one of the allowed files,
// and the heap profile at its end beside it (".heap" before the extension).
type profiler struct {
	allowed []string
	mu      sync.Mutex
	f       *os.File
}

func (p *profiler) toggle(path string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f != nil {
		pprof.StopCPUProfile()
		err := errors.Join(p.f.Close(), writeHeap(profileBeside(p.f.Name(), "heap")))
		p.f = nil
		if err != nil || path == "" {
			return err
		}
	}
	if path == "" {
		return errors.New("no profile running")
	}
	if !slices.Contains(p.allowed, path) {
		return fmt.Errorf("%q is not a profile file this process was started with", path)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	p.f = f
	return nil
}

// writeHeap writes this process's heap profile (as of its last collection)
// to file: what a profiled window leaves live.
func writeHeap(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	return errors.Join(pprof.WriteHeapProfile(f), f.Close())
}

func childConnect(url, role string) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("toolbus-bench-" + role), nats.MaxReconnects(0)}
	if role == roleRouter {
		// As cmd/router: workers of a secured deployment answer there.
		opts = append(opts, nats.CustomInboxPrefix(security.RouterInbox))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", url, err)
	}
	return nc, nil
}

// childRouter runs one router with cmd/router's defaults and the bench
// group, without built-in tools.
func childRouter(ctx context.Context, nc *nats.Conn) (func(context.Context), error) {
	memtune.Apply(memtune.DefaultGCPercent, memtune.DefaultMemoryLimit)
	r, err := router.New(nc, router.Config{Groups: benchGroups,
		Store: store.Config{Replicas: 1, Heartbeat: bus.DefaultHeartbeat, WorkAckWait: store.DefaultWorkAckWait}})
	if err != nil {
		return nil, err
	}
	if err := r.Start(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) { drain(ctx, r.Drain) }, nil
}

// drain runs a Drain bounded by 10 s, even when ctx has ended.
func drain(ctx context.Context, fn func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = fn(ctx)
}

// childRelay runs the raw forwarder: requests on rawRelay go to the
// responder with the caller's reply subject inside the forwarder's, and
// replies back, without decoding, a goroutine or a map per request.
func childRelay(ctx context.Context, url string) (func(context.Context), error) {
	fwd, err := childConnect(url, roleRelay)
	if err != nil {
		return nil, err
	}
	err = subscribe(fwd, rawRelay, "bench-relay", func(m *nats.Msg) {
		_ = fwd.PublishMsg(&nats.Msg{Subject: rawEcho, Reply: rawBack + m.Reply, Data: m.Data})
	})
	if err == nil {
		err = subscribe(fwd, rawBack+">", "", func(m *nats.Msg) { _ = fwd.Publish(m.Subject[len(rawBack):], m.Data) })
	}
	if err == nil {
		err = bus.Flush(ctx, fwd)
	}
	if err != nil {
		fwd.Close()
		return nil, err
	}
	return func(context.Context) { fwd.Close() }, nil
}

// childResponder runs the raw responder on its own connection, with Go's
// default collector: the raw baselines are nats.go untuned.
func childResponder(ctx context.Context, url string) (func(context.Context), error) {
	resp, err := childConnect(url, roleResponder)
	if err != nil {
		return nil, err
	}
	if err = subscribe(resp, rawEcho, "", func(m *nats.Msg) { _ = resp.Publish(m.Reply, m.Data) }); err == nil {
		err = bus.Flush(ctx, resp)
	}
	if err != nil {
		resp.Close()
		return nil, err
	}
	return func(context.Context) { resp.Close() }, nil
}

// childWorker runs one toolbus worker with the trivial tools, its collector
// tuned as cmd/toolworker's, and returns once a router acknowledged the
// registration.
func childWorker(ctx context.Context, url string) (stop func(context.Context), err error) {
	memtune.Apply(memtune.DefaultGCPercent, memtune.DefaultMemoryLimit)
	wnc, err := childConnect(url, roleWorker)
	if err != nil {
		return nil, err
	}
	w, err := StartWorker(ctx, wnc, worker.Config{}, registerTrivial)
	if err != nil {
		wnc.Close()
		return nil, err
	}
	return func(ctx context.Context) { drain(ctx, w.Drain); wnc.Close() }, nil
}

// StartWorker starts a worker on nc (heartbeat bus.DefaultHeartbeat unless
// cfg says) with the tools setup registers, and returns once a router
// acknowledged the registration; on an error the worker is stopped.
func StartWorker(ctx context.Context, nc *nats.Conn, cfg worker.Config, setup func(*worker.Worker) error) (*worker.Worker, error) {
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, bus.DefaultHeartbeat)
	w, err := worker.New(nc, cfg)
	if err != nil {
		return nil, err
	}
	if err = setup(w); err == nil {
		err = w.Start(ctx)
	}
	if err == nil {
		select {
		case <-w.Registered():
			return w, nil
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(readyBound):
			err = fmt.Errorf("worker not registered after %v", readyBound)
		}
	}
	_ = w.Stop(context.WithoutCancel(ctx))
	return nil, err
}

type textIn struct {
	Text string `json:"text" jsonschema:"description=Text to echo back."`
}

// registerTrivial registers the trivial tools on w: echo (read-only), put
// (not read-only: the dedupe ledger records it) and ask_human (external).
func registerTrivial(w *worker.Worker) error {
	echo := func(_ context.Context, _ *worker.Call, in textIn) (string, error) { return in.Text, nil }
	for _, def := range []bus.ToolDef{
		{Name: toolRead, Description: "Echo the text (read-only).", Groups: []string{benchGroup}, ReadOnly: true},
		{Name: toolWrite, Description: "Store the text (not read-only).", Groups: []string{benchGroup}, Permission: bus.PermissionAllow},
		{Name: toolParked, Description: "Ask a person (external).", External: true, Permission: bus.PermissionAllow},
	} {
		if err := worker.Register(w, def, echo); err != nil {
			return err
		}
	}
	return nil
}
