//go:build linux

package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/toolbus/toolbus/shellcmd"
	"golang.org/x/sys/unix"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// interpret runs an allow-listed command with the in-process POSIX
// interpreter in the sandbox's exec stage (docs/builtin.md, "The kernel runs
// nothing else"): a command name not listed is refused at run time, and
// write redirections follow no symlink and never touch a protected path. It
// returns the command's exit status.
func interpret(spec sandboxSpec) int {
	file, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(spec.Command), "")
	if err != nil {
		fmt.Fprintf(os.Stderr, "toolbus-sandbox: %v\n", err)
		return 2
	}
	r, err := interp.New(
		interp.StdIO(os.Stdin, os.Stdout, os.Stderr),
		interp.Env(expand.ListEnviron(os.Environ()...)),
		interp.Dir(spec.Dir),
		interp.CallHandler(func(_ context.Context, args []string) ([]string, error) {
			if !slices.Contains(spec.Names, args[0]) {
				return nil, fmt.Errorf("%s is not an allowed program", args[0])
			}
			return args, nil
		}),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc { return execProgram }),
		interp.OpenHandler(openNoFollow(spec.Dir)),
	)
	if err != nil {
		return cannotRun("%v", err)
	}
	err = r.Run(context.Background(), file)
	if code, ok := errors.AsType[interp.ExitStatus](err); ok {
		return int(code)
	}
	if err != nil {
		return cannotRun("%v", err)
	}
	return 0
}

// execProgram starts a program the way a shell does, without the
// interpreter's fallback of running a file the kernel would not execute
// as a script of its own.
func execProgram(ctx context.Context, args []string) error {
	hc := interp.HandlerCtx(ctx)
	path, err := interp.LookPathDir(hc.Dir, hc.Env, args[0])
	if err != nil {
		fmt.Fprintln(hc.Stderr, err)
		return interp.ExitStatus(127)
	}
	cmd := exec.Command(path)
	cmd.Args, cmd.Dir = args, hc.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = hc.Stdin, hc.Stdout, hc.Stderr
	for name, v := range hc.Env.Each {
		if v.IsSet() && v.Exported && v.Kind == expand.String {
			cmd.Env = append(cmd.Env, name+"="+v.Str)
		}
	}
	err = cmd.Run()
	ee, exited := errors.AsType[*exec.ExitError](err)
	switch {
	case err == nil:
		return nil
	case exited:
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return interp.ExitStatus(128 + int(ws.Signal()))
		}
		return interp.ExitStatus(uint8(ee.ExitCode()))
	default:
		fmt.Fprintf(hc.Stderr, "%s: %v\n", args[0], err)
		if errors.Is(err, os.ErrPermission) {
			return interp.ExitStatus(126)
		}
		return interp.ExitStatus(127)
	}
}

// openNoFollow opens the command's redirections: reads as usual; writes
// never through a symlink (openat2 RESOLVE_NO_SYMLINKS, so no link made
// by anyone, in this command or before it, redirects a write) and never
// onto a protected path (a .git directory, a shell's or git's dotfiles).
func openNoFollow(base string) interp.OpenHandlerFunc {
	return func(ctx context.Context, path string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
		if path != "" && !filepath.IsAbs(path) {
			path = filepath.Join(interp.HandlerCtx(ctx).Dir, path)
		}
		if flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) == 0 || slices.Contains([]string{"/dev/null", "/dev/zero", "/dev/full", "/dev/stdout", "/dev/stderr"}, path) {
			return os.OpenFile(path, flag, perm)
		}
		rel := path
		if r, err := filepath.Rel(base, path); err == nil && !strings.HasPrefix(r, "..") {
			rel = r
		}
		if name, bad := shellcmd.Protected(rel); bad {
			return nil, fmt.Errorf("%s: %s is protected (git or a shell reads it as configuration that can run programs)", path, name)
		}
		// Without openat2 (ENOSYS, a seccomp EPERM) the same guarantee
		// comes from a walk opening each component O_NOFOLLOW, not from
		// O_NOFOLLOW alone, which guards only the last one.
		fd, err := openNoSymlinks(unix.AT_FDCWD, filepath.Clean(path), flag, perm, unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return os.NewFile(uintptr(fd), path), nil
	}
}
