package builtin

import (
	"bytes"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// protectAllow is an allow-list of programs with profiles that write.
var protectAllow = []string{"cat", "echo", "cp", "mv", "sed", "tar", "find", "tee", "ln", "touch", "dd", "sort",
	"uniq", "chmod", "git", "mkdir", "rm", "cd", "pushd", "ls", "printf", "file", "xxd", "install", "gzip"}

// TestShellProtectedWrites: every route into .git and into the dotfiles
// git or a shell reads that the issue-26 attack named (and their
// siblings) is refused with an allow-list; ordinary writes are not.
func TestShellProtectedWrites(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "x"), "x")
	if err := os.MkdirAll(filepath.Join(dir, "r3", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("r3/.git", filepath.Join(dir, "lnk")); err != nil {
		t.Fatal(err)
	}
	s := newShell(t, Config{WorkDir: dir, ShellAllow: protectAllow})
	for _, cmd := range []string{
		"cat x > out.txt", "cat x >> sub/new.txt", "echo x 2>/dev/null >&2", "echo x 2>&1 >/dev/null",
		"cp x y", "mv y z", "sed -i s/a/b/ x", "sed -n 'p;=' x", "sed -e 's/a/b/g;1d' -e '$a\\' x",
		"sed -i.bak 's|a|b|2' x", "sed '/re/,+2{s/a/b/;p}' x", "tar -czf out.tgz -C sub .", "tar tzf out.tgz",
		"tar cf a.tar x", "find . -name x -delete", "find . -name '*.go' -print", "sort -o out x", "uniq x y",
		"git status", "git -C r3 log", "git log -- *.go", "git diff --output=d.diff", "touch new", "ln -s x y",
		"dd if=x of=y", "chmod +x x", "mkdir -p a/b", "cd r3 && ls", "printf '%s\\n' x", "cp -- *.txt out/",
		"ls .git", "cat .git/config", "sed 's/a/b/' -s -- x", "cat $HOME/x", "gzip -k x",
	} {
		if err := s.checkAllowed(cmd); err != nil {
			t.Errorf("%q refused: %v", cmd, err)
		}
	}
	for cmd, want := range map[string]string{
		// Redirections, literal or not.
		"cat x > .gitconfig":                         `may not write ".gitconfig" (redirection): .gitconfig is protected`,
		"echo x > .bashrc":                           ".bashrc is protected",
		"echo x > sub/.profile":                      ".profile is protected",
		"echo x >> .GIT/config":                      ".GIT is protected",
		"echo x &> .git/x":                           "must parse as plain POSIX sh",
		"echo x >| .git/x":                           ".git is protected",
		"echo x <> .git/x":                           ".git is protected",
		"echo x >& .git/x":                           ".git is protected",
		`echo x > "$HOME/.git/x"`:                    "target must be written out plainly",
		"echo x > $PWD/.git/x":                       "target must be written out plainly",
		"echo x > ~/.git/x":                          "target must be written out plainly",
		"echo x > .gi?/config":                       "target must be written out plainly",
		"echo x > lnk/config":                        `may not write "lnk/config" (redirection): .git is protected`,
		"echo x > r3/.git/config":                    ".git is protected",
		"cd .git && cat x > config":                  `may not write ".git" (cd)`,
		"for d in .git; do cd $d; done; cp x config": "cd's arguments must be written out plainly",
		"pushd r3/.git":                              ".git is protected",
		// Programs that write their operands.
		"cp x .git/config":                        `(cp): .git is protected`,
		"cp x lnk/config":                         `"lnk/config" (cp): .git is protected`,
		"cp -t .git x":                            ".git is protected",
		"cp -t.git/ x":                            ".git is protected",
		"cp --target-directory=.git x":            ".git is protected",
		"mv x r3/.git/config":                     ".git is protected",
		"install x .git/hooks/pre-commit":         ".git is protected",
		"tee .git/config":                         "(tee): .git is protected",
		"ln -s .git g":                            "(ln): .git is protected",
		"touch .git/hooks/pre-commit":             ".git is protected",
		"chmod +x .git/hooks/x":                   ".git is protected",
		"dd if=x of=.git/config":                  "(dd of=): .git is protected",
		"uniq x .git/config":                      "(uniq): .git is protected",
		"xxd -r x .git/config":                    "(xxd): .git is protected",
		"gzip -d .git/config.gz":                  ".git is protected",
		"rm -rf .git/hooks":                       ".git is protected",
		"cp -- x .g*":                             "can match a name starting with a dot",
		"rm -- {.git,y}":                          "can match a name starting with a dot",
		"cp $X .git":                              "cp's arguments must be written out plainly",
		"sort -o .git/config x":                   "(sort -o): .git is protected",
		"sort --output=.gitconfig x":              ".gitconfig is protected",
		"sort --compress-program=id x":            "sort --compress-program runs",
		"sort --compress=id x":                    "sort --compress-program runs",
		"sed -i s/a/b/ .git/config":               `(sed -i): .git is protected`,
		"sed -ni p .git/config":                   `(sed -i): .git is protected`,
		"sed --in-place=.b p r3/.git/x":           `(sed -i): .git is protected`,
		"sed -n 'w .git/config' x":                "sed's w command writes",
		"sed '/x/W out' x":                        "sed's W command writes",
		"sed 's/a/b/w .git/config' x":             "s///w flag writes",
		"sed 's/a/b/gw out' x":                    "s///w flag writes",
		"sed e x":                                 "sed's e command runs",
		"sed '1e id' x":                           "sed's e command runs",
		"sed -e p -e '$!e id' x":                  "sed's e command runs",
		"sed 's/x/id/e' x":                        "s///e flag runs",
		"sed 's/x/id/;e' x":                       "sed's e command runs",
		"sed '{s/x/id/e}' x":                      "s///e flag runs",
		"sed -f s.sed x":                          "sed -f reads its script from a file",
		"sed --file=s.sed x":                      "sed --file reads",
		"tar -cf ./.git/x .":                      `(tar -f): .git is protected`,
		"tar cf .git/x .":                         `(tar -f): .git is protected`,
		"tar -czf .git/x .":                       ".git is protected",
		"tar --file=.git/x -c .":                  ".git is protected",
		"tar -g .git/snap -cf a .":                ".git is protected",
		"tar -I id -cf a.tar .":                   "tar -I runs",
		"tar -cIid -f a.tar .":                    "tar -I runs",
		"tar --use-compress-program=id -cf a .":   "--use-compress-program runs",
		"tar --use-comp=id -cf a .":               "--use-comp runs",
		"tar -cf a . --to-command=id":             "--to-command runs",
		"tar --checkpoint-action=exec=id -cf a .": "--checkpoint-action can run",
		"tar -F id -cf a .":                       "tar -F runs",
		"tar --info-script=id -cf a .":            "--info-script runs",
		"tar --rsh-command=id -cf h:a .":          "",
		"tar -cf host:a .":                        "remote archive, which runs rsh",
		"tar -xf a.tar":                           "tar -x writes whatever file names the archive holds",
		"tar xf a.tar":                            "tar -x writes",
		"tar --extract -f a.tar":                  "--extract writes",
		"find . -exec id ;":                       "find -exec runs other programs",
		"find . -okdir id ;":                      "find -okdir runs other programs",
		"find . -fprint .git/x":                   "find -fprint writes a file",
		"find . -fprint0 x":                       "find -fprint0 writes a file",
		"find . -fls x":                           "find -fls writes a file",
		"find . -fprintf x %p":                    "find -fprintf writes a file",
		"printf -v PATH x":                        "printf -v sets a variable",
		"file -C -m x":                            "file -C writes",
		// git's own routes into .git.
		"git -C r3 checkout-index -f --prefix=.git/ config": "checkout-index --prefix writes files",
		"git -C r3/.git status":                             `(git -C): .git is protected`,
		"git -C lnk status":                                 `may not write "lnk" (git -C): .git is protected`,
		"git init --separate-git-dir=cfg r4":                "--separate-git-dir puts",
		"git clone --separate=cfg r3 r4":                    "--separate puts",
		"git checkout-index --prefix=sub/ x":                "checkout-index --prefix writes files",
		"git clone r3 r3/.git/x":                            ".git is protected",
		"git diff --output=.git/config":                     ".git is protected",
		"git diff --output .gitconfig":                      ".gitconfig is protected",
		"git format-patch -o .git/x HEAD":                   ".git is protected",
		"git checkout -- .bashrc":                           ".bashrc is protected",
		"git restore .gitconfig":                            ".gitconfig is protected",
		"git worktree add lnk/x":                            `"lnk/x" (git worktree): .git is protected`,
		// No profile, not trusted.
		"awk 1 x": `"awk" is not allowed`,
	} {
		err := s.checkAllowed(cmd)
		if err == nil || !strings.HasPrefix(err.Error(), "shell refused: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want a refusal containing %q", cmd, err, want)
		}
	}
}

// TestShellGitFilterAttack is issue 26's attack with --shell-allow git:
// a repository config with a filter, copied into .git by git itself. It
// is refused, and no filter runs.
func TestShellGitFilterAttack(t *testing.T) {
	dir := t.TempDir()
	r3 := filepath.Join(dir, "r3")
	mustWrite(t, filepath.Join(r3, "config"), "[filter \"x\"]\n\tclean = touch ../pwned-clean\n\tsmudge = touch ../pwned-smudge\n")
	mustWrite(t, filepath.Join(r3, ".gitattributes"), "* filter=x\n")
	mustWrite(t, filepath.Join(r3, "c.md"), "c\n")
	s := newShell(t, Config{WorkDir: dir, ShellAllow: []string{"git"}})
	cmd := "git -C r3 init && git -C r3 add config && git -C r3 checkout-index -f --prefix=.git/ config && git -C r3 add c.md"
	_, err := s.Run(t.Context(), "", ShellIn{Command: cmd})
	wantRefused(t, err, `shell refused: git checkout-index --prefix writes files wherever the prefix leads`)
	// Step by step, the parts that are allowed run and run no filter.
	for _, c := range []string{"git -C r3 init -q", "git -C r3 add config", "git -C r3 add c.md", "git -C r3 status --short"} {
		if out, err := s.Run(t.Context(), "", ShellIn{Command: c}); err != nil || !strings.HasPrefix(out, "Exit code: 0") {
			t.Fatalf("%s: %q %v", c, out, err)
		}
	}
	for _, n := range []string{"pwned-clean", "pwned-smudge"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s exists: a filter ran", n)
		}
	}
}

// TestShellTrust: a program with no profile is refused on the allow-list
// and runs with any arguments when trusted.
func TestShellTrust(t *testing.T) {
	if _, err := NewShell(t.Context(), Config{WorkDir: t.TempDir(), ShellAllow: []string{"sh"}}); err == nil || !strings.Contains(err.Error(), "--shell-trust") {
		t.Fatalf("sh on the allow-list: %v", err)
	}
	if _, err := NewShell(t.Context(), Config{WorkDir: t.TempDir(), ShellTrust: []string{"env"}}); err == nil {
		t.Fatal("env trusted")
	}
	s := newShell(t, Config{ShellAllow: []string{"echo"}, ShellTrust: []string{"sh"}})
	out, err := s.Run(t.Context(), "", ShellIn{Command: "sh -c 'echo $((1+1))'"})
	if err != nil || !strings.HasPrefix(out, "Exit code: 0\nstdout:\n2\n") {
		t.Fatalf("trusted: %q %v", out, err)
	}
	_, err = s.Run(t.Context(), "", ShellIn{Command: "cat x"})
	wantRefused(t, err, `the program "cat" is not allowed; allowed programs: echo, sh`)
}

// TestShellNotRootByDefault: a root router's commands run as nobody
// without --shell-user, and as root only with --shell-as-root, which is
// logged as a warning.
func TestShellNotRootByDefault(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	s, err := NewShell(t.Context(), Config{WorkDir: dir, ShellAllow: []string{"id", "cat", "echo"}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Run(t.Context(), "", ShellIn{Command: "id -u; echo hi > mine; cat /etc/shadow"})
	want := "65534"
	if u, err := user.Lookup(DefaultShellUser); err == nil {
		want = u.Uid
	}
	if err != nil || !strings.HasPrefix(out, "Exit code: 1\nstdout:\n"+want+"\n") || !strings.Contains(out, "Permission denied") {
		t.Fatalf("default user:\n%s %v", out, err)
	}
	if strings.Contains(logs.String(), "WARN") {
		t.Errorf("warned: %s", logs.String())
	}
	logs.Reset()
	s, err = NewShell(t.Context(), Config{WorkDir: dir, ShellAsRoot: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := s.Run(t.Context(), "", ShellIn{Command: "id -u"}); !strings.HasPrefix(out, "Exit code: 0\nstdout:\n0\n") {
		t.Fatalf("as root: %s", out)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"shell: commands run as root (--shell-as-root)") {
		t.Errorf("no warning: %s", logs.String())
	}
	// A base directory the default user cannot write is named at start.
	logs.Reset()
	if _, err := NewShell(t.Context(), Config{WorkDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "not writable by the shell's user") {
		t.Errorf("no warning about the base directory: %s", logs.String())
	}
	if ShellUserFor("", false) != DefaultShellUser || ShellUserFor("", true) != "" || ShellUserFor("bob", true) != "bob" {
		t.Error("ShellUserFor")
	}
}

// TestShellKernelRunsOnlyListed: with an allow-list and Landlock, a
// repository config that the check did not see written (planted here
// directly, as a route the check does not know would) still runs no
// filter, textconv or hook: git may execute only the listed programs, no
// shell is started, and nothing in the base directory is executable.
func TestShellKernelRunsOnlyListed(t *testing.T) {
	dir := t.TempDir()
	s := newShell(t, Config{WorkDir: dir, ShellAllow: []string{"git", "cp", "cat"}})
	if !s.landlock {
		t.Skip("no Landlock here")
	}
	r3 := filepath.Join(dir, "r3")
	for _, c := range []string{"git init -q r3", "cp /usr/bin/id r3/myid"} {
		if out, err := s.Run(t.Context(), "", ShellIn{Command: c}); err != nil || !strings.HasPrefix(out, "Exit code: 0") {
			t.Fatalf("%s: %q %v", c, out, err)
		}
	}
	if err := os.Chmod(filepath.Join(r3, "myid"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(r3, ".git", "config"), "[core]\n\trepositoryformatversion = 0\n[user]\n\tname = x\n\temail = x@y\n"+
		"[filter \"a\"]\n\tclean = touch ../pwned-clean\n\tsmudge = touch ../pwned-smudge\n\trequired = false\n"+
		"[filter \"b\"]\n\tclean = sh -c 'id > ../pwned-sh'\n"+
		"[filter \"c\"]\n\tclean = ./myid\n"+
		"[diff \"d\"]\n\ttextconv = touch ../pwned-textconv\n")
	mustWrite(t, filepath.Join(r3, ".gitattributes"), "a.md filter=a\nb.md filter=b\nc.md filter=c\n*.md diff=d\n")
	for _, n := range []string{"a.md", "b.md", "c.md"} {
		mustWrite(t, filepath.Join(r3, n), "x\n")
	}
	mustWrite(t, filepath.Join(r3, ".git", "hooks", "pre-commit"), "#!/bin/sh\ntouch ../../pwned-hook\n")
	if err := os.Chmod(filepath.Join(r3, ".git", "hooks", "pre-commit"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := s.Run(t.Context(), "", ShellIn{Command: "git -C r3 add a.md b.md c.md; git -C r3 -c user.name=x commit -qm x; git -C r3 diff HEAD; cat r3/a.md"})
	if err == nil {
		// The -c above is refused by the check; run the rest plainly.
		t.Fatalf("git -c accepted: %s", out)
	}
	out, err = s.Run(t.Context(), "", ShellIn{Command: "git -C r3 add a.md b.md c.md; git -C r3 commit -qm x --author='x <x@y>'; git -C r3 log -p; cp r3/b.md r3/a.md; git -C r3 diff -- a.md; git -C r3 show HEAD:a.md"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"pwned-clean", "pwned-smudge", "pwned-sh", "pwned-textconv", "pwned-hook"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s exists: a program outside the list ran\n%s", n, out)
		}
	}
	if !strings.Contains(out, "cannot run") && !strings.Contains(out, "Permission denied") {
		t.Errorf("no sign of a refused exec:\n%s", out)
	}
	// The run-time check: a name the interpreter meets that is not listed.
	var stdout, stderr capped
	stdout.max, stderr.max = 1000, 1000
	spec := sandboxSpec{Command: "cat /etc/hostname", Dir: s.Dir, Tmp: t.TempDir(), Landlock: true, UID: -1, GID: -1,
		Interp: true, ExecFiles: s.execFiles, ExecDirs: s.execDirs, Names: []string{"git"}}
	state, _ := s.exec(t.Context(), spec, []string{"PATH=" + DefaultShellPath}, &stdout, &stderr)
	if state == nil || state.ExitCode() == 0 || !strings.Contains(stderr.text(), "cat is not an allowed program") {
		t.Errorf("run-time check: %v %q %q", state, stdout.text(), stderr.text())
	}
	// A write redirection does not follow a symlink.
	if err := os.Symlink("r3/.git", filepath.Join(dir, "made-later")); err != nil {
		t.Fatal(err)
	}
	spec.Command, spec.Names = "cat r3/a.md > made-later/config", []string{"cat"}
	stdout, stderr = capped{max: 1000}, capped{max: 1000}
	if state, _ := s.exec(t.Context(), spec, []string{"PATH=" + DefaultShellPath}, &stdout, &stderr); state == nil || state.ExitCode() == 0 {
		t.Errorf("write through a link: %v %q", state, stderr.text())
	}
	if b, _ := os.ReadFile(filepath.Join(r3, ".git", "config")); !strings.Contains(string(b), "filter") {
		t.Errorf("config overwritten: %q", b)
	}
}
