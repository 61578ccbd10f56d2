package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
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
	t := time.NewTimer(spec.Bound)
	defer t.Stop()
	select {
	case p.Extra = <-ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("exited before it was ready: %s", p.tail)
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
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
