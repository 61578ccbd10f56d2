package mcpinterop

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// installTimeout bounds `npm ci` (a cold install of the pinned packages
// takes about 20 s here).
const installTimeout = 4 * time.Minute

var (
	installOnce sync.Once
	installDir  string // holds node_modules of js/package-lock.json
	installSkip string // why the JS clients cannot run, when they cannot
)

// jsDir returns the directory whose node_modules has the packages pinned
// in js/package-lock.json, installed by `npm ci --prefer-offline` into
// os.UserCacheDir()/toolbus-interop/<SHA-256 of the lockfile> the first
// time and reused after; it skips t when node or npm is missing or the
// install fails (offline, say), with the reason.
func jsDir(t *testing.T) string {
	t.Helper()
	installOnce.Do(func() { installDir, installSkip = install() })
	if installSkip != "" {
		t.Skip(installSkip)
	}
	return installDir
}

func install() (dir, skip string) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", tool + " is not installed: the JS clients are not tested"
		}
	}
	lock, err := os.ReadFile(filepath.Join("js", "package-lock.json"))
	if err != nil {
		return "", err.Error()
	}
	pkg, err := os.ReadFile(filepath.Join("js", "package.json"))
	if err != nil {
		return "", err.Error()
	}
	sum := sha256.Sum256(append(append([]byte{}, lock...), pkg...))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir = filepath.Join(cache, "toolbus-interop", hex.EncodeToString(sum[:8]))
	// npm ci writes node_modules/.package-lock.json last: its presence
	// marks a complete install.
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil {
		return dir, ""
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err.Error()
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		return "", err.Error()
	}
	defer os.RemoveAll(tmp)
	if err := errors.Join(os.WriteFile(filepath.Join(tmp, "package.json"), pkg, 0o644),
		os.WriteFile(filepath.Join(tmp, "package-lock.json"), lock, 0o644)); err != nil {
		return "", err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--prefer-offline", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir = tmp
	var outb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outb, &outb
	if err := cmd.Run(); err != nil {
		return "", fmt.Sprintf("npm ci of js/package-lock.json failed (offline?): %v: %s", err, lastLines(outb.String(), 5))
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another test process installed it meanwhile.
		if _, serr := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); serr != nil {
			return "", err.Error()
		}
	}
	return dir, ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// script copies js/<name> into a temporary directory beside a link to the
// installed node_modules, so that node resolves the pinned packages, and
// returns its path.
func script(t *testing.T, name string) string {
	t.Helper()
	dir := jsDir(t)
	tmp := t.TempDir()
	src, err := os.ReadFile(filepath.Join("js", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(os.WriteFile(filepath.Join(tmp, name), src, 0o644),
		os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(tmp, "node_modules"))); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(tmp, name)
}

// bin is the path of an installed package's command.
func bin(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(jsDir(t), "node_modules", ".bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// step is one line the TypeScript script printed.
type step struct {
	Step    string   `json:"step"`
	Error   string   `json:"error"`
	Version string   `json:"version"`
	Names   []string `json:"names"`
	Text    string   `json:"text"`
	IsError bool     `json:"isError"`
	Asked   []string `json:"asked"`
	Aborted bool     `json:"aborted"`
	Message string   `json:"message"`
	Kinds   []string `json:"kinds"`
	Notices int      `json:"notices"`
	// Structured is a result's structuredContent.
	Structured json.RawMessage `json:"structured"`
}

// nodeProc is a running node script: its steps (and each one's line),
// and its stdin.
type nodeProc struct {
	steps  chan step
	raws   chan []byte
	stdin  io.WriteCloser
	stderr *testkit.Buffer
}

// runNode starts node on path with args; the process is killed when t
// ends.
func runNode(t *testing.T, path string, args ...string) *nodeProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, "node", append([]string{path}, args...)...)
	p := &nodeProc{steps: make(chan step, 32), raws: make(chan []byte, 32), stderr: &testkit.Buffer{}}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(p.steps)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var s step
			if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
				s = step{Step: "unparsed", Error: sc.Text()}
			}
			p.raws <- slices.Clone(sc.Bytes())
			p.steps <- s
		}
	}()
	t.Cleanup(func() {
		cancel() // t's context has ended: node is killed if still running
		<-done
		_ = cmd.Wait()
	})
	return p
}

// next returns the script's next step, which must be want.
func (p *nodeProc) next(t *testing.T, want string) step {
	t.Helper()
	s, _ := p.nextWithin(t, want, bound)
	return s
}

// nextRaw is next, returning the step's line as printed.
func (p *nodeProc) nextRaw(t *testing.T, want string) []byte {
	t.Helper()
	_, raw := p.nextWithin(t, want, bound)
	return raw
}

// nextWithin is next within d, returning the step and its line.
func (p *nodeProc) nextWithin(t *testing.T, want string, d time.Duration) (step, []byte) {
	t.Helper()
	select {
	case s, ok := <-p.steps:
		if !ok {
			t.Fatalf("the script ended before %q; stderr: %s", want, p.stderr.String())
		}
		raw := <-p.raws
		if s.Step != want || s.Error != "" {
			t.Fatalf("step %s, want %q without error; stderr: %s", raw, want, p.stderr.String())
		}
		return s, raw
	case <-time.After(d):
		t.Fatalf("no step %q within %s; stderr: %s", want, d, p.stderr.String())
		panic("unreachable")
	}
}

func (p *nodeProc) say(t *testing.T, word string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, word+"\n"); err != nil {
		t.Fatal(err)
	}
}
