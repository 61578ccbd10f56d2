package builtin

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The programs an allow-listed command may execute (docs/builtin.md, "The
// kernel runs nothing else"): with Landlock, the sandbox grants the
// execute right on these files only (and on git's exec-path directory),
// and the command is interpreted in-process instead of by /bin/sh, so no
// configuration, attribute or option of an allowed program can start a
// program outside the list: the kernel refuses the exec.

// execList resolves the allow-listed and trusted names on path (a name
// the interpreter runs as a builtin, such as cd or echo, may be missing)
// and adds what the kernel opens to execute them: an ELF program's
// interpreter (the dynamic loader). dirs are directories whose files may all
// be executed: git's exec-path.
func execList(names []string, path string) (files, dirs []string) {
	add := func(p string) {
		if p != "" && !slices.Contains(files, p) {
			files = append(files, p)
		}
	}
	for _, n := range names {
		p := lookPath(n, path)
		if p == "" {
			continue
		}
		add(p)
		for _, extra := range interpreters(p) {
			add(extra)
		}
		if filepath.Base(n) == "git" {
			if d := gitExecPath(p); d != "" {
				dirs = append(dirs, d)
			}
		}
	}
	return files, dirs
}

// lookPath finds name on the colon-separated path; an absolute name is
// taken as it is. "" when there is no such executable file.
func lookPath(name, path string) string {
	if filepath.IsAbs(name) {
		if isExecutable(name) {
			return name
		}
		return ""
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		if p := filepath.Join(d, name); isExecutable(p) {
			return p
		}
	}
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// interpreters returns what the kernel opens to execute the ELF program
// p: its interpreter (the dynamic loader). A script's #! interpreter is
// not added: a shell there would let every listed program's
// configuration start any command through it; the operator lists the
// interpreter (with --shell-trust) if a script must run.
func interpreters(p string) []string {
	f, err := elf.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err == nil {
				return []string{strings.TrimRight(string(b), "\x00")}
			}
		}
	}
	return nil
}

// gitExecPath asks git where its helper programs live (remote helpers
// for https, git's own subcommands); "" if it does not say.
func gitExecPath(git string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, git, "--exec-path")
	cmd.Env = []string{"PATH=" + DefaultShellPath, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	d := strings.TrimSpace(string(out))
	if fi, err := os.Stat(d); err != nil || !fi.IsDir() || !filepath.IsAbs(d) {
		return ""
	}
	return d
}
