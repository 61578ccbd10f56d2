package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// child is one process of the cross-process deployment.
type child struct {
	role   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tail
	done   chan struct{} // closed when the process has exited
}

// tail keeps the last bytes a child wrote to stderr, for error messages.
type tail struct {
	mu  sync.Mutex
	buf []byte
	out io.Writer // also copied here when set (verbose)
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

// startChild starts exe as role with env added and waits for its ready
// line; it returns what followed "ready" on it.
func startChild(ctx context.Context, exe, role string, env []string, stderr io.Writer) (*child, string, error) {
	c := &child{role: role, stderr: &tail{out: stderr}, done: make(chan struct{})}
	c.cmd = exec.Command(exe)
	c.cmd.Env = append(append(os.Environ(), envChild+"="+role), env...)
	c.cmd.Stderr = c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, "", err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("bench: start %s process: %w", role, err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_ = c.cmd.Wait()
		close(c.done)
	}()
	t := time.NewTimer(readyBound)
	defer t.Stop()
	select {
	case line := <-lines:
		rest, ok := strings.CutPrefix(line, childReady)
		if !ok {
			c.stop()
			return nil, "", fmt.Errorf("bench: %s process said %q", role, line)
		}
		return c, strings.TrimSpace(rest), nil
	case <-c.done:
		return nil, "", fmt.Errorf("bench: %s process exited: %s", role, c.stderr)
	case <-ctx.Done():
		c.stop()
		return nil, "", ctx.Err()
	case <-t.C:
		c.stop()
		return nil, "", fmt.Errorf("bench: %s process not ready after %v: %s", role, readyBound, c.stderr)
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// childStop bounds a child's orderly exit after its stdin closes.
const childStop = 20 * time.Second

// stop closes the child's stdin (its signal to drain and exit) and kills
// it when it has not exited in time.
func (c *child) stop() {
	if c == nil {
		return
	}
	_ = c.stdin.Close()
	t := time.NewTimer(childStop)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// xdeployment is the cross-process deployment: nats-server, the router,
// the relay forwarder and the worker (with the raw responder) each in a
// process of its own, the callers in this one.
type xdeployment struct {
	dir      string
	url      string
	children map[string]*child // by role
	ctl      *nats.Conn        // control and status requests
	rawNC    *nats.Conn        // the raw requester
	clientNC *nats.Conn
	client   *client.Client
	payload  []byte
	sessions []string
	mcp      *mcpHTTP // clients of the mcp-go server process; nil without one
}

// xconfig describes a cross-process deployment.
type xconfig struct {
	exe        string              // the binary run as each part
	sessions   int                 // sessions with the bench group active
	mcpClients int                 // > 0: mcp-go's server in a process, and that many clients here
	profiles   map[string][]string // by role: the only files the process may write CPU profiles to
	stderr     io.Writer           // the processes' logs; nil keeps the last lines only
}

// xdeploy starts the processes in dependency order, waits until the
// router lists the worker's tools live and activates the bench group in
// cfg.sessions sessions.
func xdeploy(ctx context.Context, cfg xconfig) (d *xdeployment, err error) {
	exe, stderr := cfg.exe, cfg.stderr
	d = &xdeployment{children: map[string]*child{}}
	defer func() {
		if err != nil {
			d.close(ctx)
			d = nil
		}
	}()
	if d.dir, err = os.MkdirTemp("", "toolbus-xbench-*"); err != nil {
		return nil, err
	}
	var c *child
	if c, d.url, err = startChild(ctx, exe, roleNATS, []string{envDir + "=" + d.dir}, stderr); err != nil {
		return nil, err
	}
	d.children[roleNATS] = c
	for _, role := range []string{roleRouter, roleRelay, roleWorker} {
		env := []string{envURL + "=" + d.url}
		if files := cfg.profiles[role]; len(files) > 0 {
			env = append(env, envProfiles+"="+strings.Join(files, string(os.PathListSeparator)))
		}
		if c, _, err = startChild(ctx, exe, role, env, stderr); err != nil {
			return nil, err
		}
		d.children[role] = c
	}
	if cfg.mcpClients > 0 {
		var url string
		if c, url, err = startChild(ctx, exe, roleMCP, []string{envURL + "=" + d.url}, stderr); err != nil {
			return nil, err
		}
		d.children[roleMCP] = c
		d.mcp = &mcpHTTP{}
		if err = d.mcp.connect(ctx, url, cfg.mcpClients); err != nil {
			return nil, err
		}
	}
	conn := func(name string) (*nats.Conn, error) {
		return nats.Connect(d.url, nats.Name("toolbus-bench-"+name), nats.MaxReconnects(0))
	}
	if d.ctl, err = conn("control"); err != nil {
		return nil, err
	}
	if d.rawNC, err = conn("raw"); err != nil {
		return nil, err
	}
	if d.clientNC, err = conn("client"); err != nil {
		return nil, err
	}
	d.client = client.New(d.clientNC, client.Config{Source: "bench/agent"})
	if d.payload, err = rawPayload(); err != nil {
		return nil, err
	}
	if err = d.waitLive(ctx, toolRead, toolWrite); err != nil {
		return nil, err
	}
	d.sessions, err = prepareSessions(ctx, d.client, cfg.sessions)
	return d, err
}

// rawPayload is the raw paths' request and reply: an encoded batch event.
func rawPayload() ([]byte, error) {
	ev, err := bus.NewEvent(bus.TypeCallBatch, "bench/agent", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: toolRead, Input: benchInput}}})
	if err != nil {
		return nil, err
	}
	ev.SessionID = "bench-0"
	return ev.Encode()
}

// status asks the router for its P.admin.status.
func (d *xdeployment) status(ctx context.Context) (bus.Status, error) {
	var st bus.Status
	e, err := bus.NewEvent(bus.TypeAdmin, "bench/agent", struct{}{})
	if err != nil {
		return st, err
	}
	m, err := e.Msg(bus.NewSubjects("").Admin("status"))
	if err != nil {
		return st, err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := d.ctl.RequestMsgWithContext(rctx, m)
	if err != nil {
		return st, err
	}
	re, err := bus.Decode(resp)
	if err != nil {
		return st, err
	}
	if re.Type != bus.TypeAdminReply {
		return st, fmt.Errorf("status reply %s: %s", re.Type, re.Data)
	}
	return st, re.DataAs(&st)
}

// pollStatus asks for the router's status until ok accepts it, within
// readyBound.
func (d *xdeployment) pollStatus(ctx context.Context, ok func(bus.Status) error) error {
	ctx, cancel := context.WithTimeout(ctx, readyBound)
	defer cancel()
	var last error
	for {
		st, err := d.status(ctx)
		if err == nil {
			if err = ok(st); err == nil {
				return nil
			}
		}
		last = err
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("bench: router status: %w (last: %v)", ctx.Err(), last)
		case <-t.C:
		}
	}
}

func (d *xdeployment) waitLive(ctx context.Context, names ...string) error {
	return d.pollStatus(ctx, func(st bus.Status) error { return st.CheckLive(names...) })
}

// stats asks one child for its costs so far.
func (d *xdeployment) stats(ctx context.Context, role string, req ctlRequest) (childStats, error) {
	var st childStats
	body, err := json.Marshal(req)
	if err != nil {
		return st, err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := d.ctl.RequestWithContext(rctx, ctlSubject(role), body)
	if err != nil {
		return st, fmt.Errorf("bench: %s stats: %w", role, err)
	}
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return st, fmt.Errorf("bench: %s stats: %w", role, err)
	}
	if st.Err != "" {
		return st, fmt.Errorf("bench: %s: %s", role, st.Err)
	}
	return st, nil
}

// snapshot is every process's stats at one moment; the bench process is
// under roleClient.
type snapshot map[string]childStats

const (
	roleClient  = "client"
	roleMachine = "machine" // every process on the machine (CPUNS only)
)

func (d *xdeployment) snapshot(ctx context.Context) (snapshot, error) {
	s := snapshot{}
	for role := range d.children {
		st, err := d.stats(ctx, role, ctlRequest{})
		if err != nil {
			return nil, err
		}
		s[role] = st
	}
	s[roleClient] = readStats(false)
	s[roleMachine] = childStats{CPUNS: machineBusy().Nanoseconds()}
	return s, nil
}

// measureLoad runs a load and returns it with every process's costs over
// it.
func (d *xdeployment) measureLoad(ctx context.Context, dur time.Duration, callers int, fn callFunc) (load, snapshot, error) {
	before, err := d.snapshot(ctx)
	if err != nil {
		return load{}, nil, err
	}
	l, err := runLoad(ctx, dur, callers, fn)
	if err != nil {
		return l, nil, err
	}
	after, err := d.snapshot(ctx)
	if err != nil {
		return l, nil, err
	}
	diff := snapshot{}
	for role, a := range after {
		b := before[role]
		diff[role] = childStats{CPUNS: a.CPUNS - b.CPUNS, Mallocs: a.Mallocs - b.Mallocs, NumGC: a.NumGC - b.NumGC,
			RSSKB: a.RSSKB, HWMKB: a.HWMKB, HeapInuse: a.HeapInuse}
	}
	return l, diff, nil
}

// profile runs a load while the router process writes a CPU profile to
// file, and returns the calls made and the router's CPU over them.
func (d *xdeployment) profile(ctx context.Context, files map[string]string, dur time.Duration, callers int, fn callFunc) ([]Profile, error) {
	roles := slices.Sorted(maps.Keys(files))
	before := map[string]childStats{}
	for _, role := range roles {
		file := files[role]
		st, err := d.stats(ctx, role, ctlRequest{Profile: &file})
		if err != nil {
			return nil, err
		}
		before[role] = st
	}
	l, lerr := runLoad(ctx, dur, callers, fn)
	errs := []error{lerr}
	var out []Profile
	for _, role := range roles {
		off := ""
		after, err := d.stats(ctx, role, ctlRequest{Profile: &off})
		p := Profile{Role: role, File: files[role], Callers: callers, Calls: l.total, Seconds: l.wall.Seconds(),
			CPUUSPerCall: perCallOf(float64(after.CPUNS-before[role].CPUNS)/1e3, l.total)}
		if err == nil {
			p.Shares, err = SplitProfile(p.File, l.total)
		}
		errs = append(errs, err)
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

func (d *xdeployment) relay(ctx context.Context, _ int) error {
	_, err := d.rawNC.RequestWithContext(ctx, rawRelay, d.payload)
	return err
}

func (d *xdeployment) callTool(tool string) callFunc {
	return func(ctx context.Context, i int) error {
		return callOnce(ctx, d.client, d.sessions[i%len(d.sessions)], tool)
	}
}

// close stops the callers' connections and the processes in reverse
// order of their start, and removes the store.
func (d *xdeployment) close(ctx context.Context) {
	if d.mcp != nil {
		d.mcp.close(ctx)
	}
	for _, nc := range []*nats.Conn{d.clientNC, d.rawNC, d.ctl} {
		if nc != nil {
			nc.Close()
		}
	}
	for _, role := range []string{roleMCP, roleWorker, roleRelay, roleRouter, roleNATS} {
		d.children[role].stop()
	}
	if d.dir != "" {
		_ = os.RemoveAll(d.dir)
	}
}

// childErrors returns what the children said on stderr, for a failed run.
func (d *xdeployment) childErrors() string {
	var b bytes.Buffer
	for _, role := range []string{roleNATS, roleRouter, roleRelay, roleWorker, roleMCP} {
		if c := d.children[role]; c != nil {
			if s := c.stderr.String(); s != "" {
				fmt.Fprintf(&b, "%s: %s\n", role, s)
			}
		}
	}
	return b.String()
}
