package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
)

// Helpers finds the executables names (other commands of this module, as
// "router" or "toolbus-bench") in dir when set, else next to this
// executable, else on $PATH, and else builds them (go build ./cmd/<name>)
// into tmp when the current directory is inside the toolbus module (go run
// ./cmd/toolbus ...). It returns their paths, in order, and where they came
// from.
func Helpers(ctx context.Context, dir, tmp string, logf func(string, ...any), names ...string) (paths []string, from string, err error) {
	// find returns the path look gives each name, unless it finds one not.
	find := func(look func(name string) (string, bool)) ([]string, bool) {
		ps := make([]string, len(names))
		for i, n := range names {
			var ok bool
			if ps[i], ok = look(n); !ok {
				return nil, false
			}
		}
		return ps, true
	}
	in := func(d string) ([]string, bool) {
		return find(func(n string) (string, bool) {
			p := filepath.Join(d, n)
			return p, isExecutable(p)
		})
	}
	list := strings.Join(names, " and ")
	if dir != "" {
		if ps, ok := in(dir); ok {
			return ps, "--bin " + dir, nil
		}
		return nil, "", fmt.Errorf("--bin %s: %s must be executables there", dir, list)
	}
	if exe, err := os.Executable(); err == nil {
		if ps, ok := in(filepath.Dir(exe)); ok {
			return ps, "next to " + exe, nil
		}
	}
	onPath := func(n string) (string, bool) {
		p, err := osexec.LookPath(n)
		return p, err == nil
	}
	if ps, ok := find(onPath); ok {
		return ps, "$PATH", nil
	}
	return build(ctx, tmp, logf, names, list)
}

// build builds names from the toolbus module the current directory is in.
func build(ctx context.Context, tmp string, logf func(string, ...any), names []string, list string) ([]string, string, error) {
	out, err := osexec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return nil, "", fmt.Errorf("%s not found (--bin DIR, next to this executable, $PATH) and not inside the toolbus module to build them", list)
	}
	if mod, err := os.ReadFile(gomod); err != nil || !strings.Contains(string(mod), "module github.com/toolbus/toolbus\n") {
		return nil, "", fmt.Errorf("%s not found (--bin DIR, next to this executable, $PATH), and %s is not the toolbus module", list, gomod)
	}
	bin := filepath.Join(tmp, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, "", err
	}
	logf("building %s into %s", list, bin)
	args := []string{"build", "-o", bin + string(filepath.Separator)}
	ps := make([]string, len(names))
	for i, n := range names {
		args = append(args, "./cmd/"+n)
		ps[i] = filepath.Join(bin, n)
	}
	cmd := osexec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	for _, p := range ps {
		if !isExecutable(p) {
			return nil, "", errors.New("go build made no " + p)
		}
	}
	return ps, "built from " + cmd.Dir, nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}
