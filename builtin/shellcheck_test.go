package builtin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestShellAllowList(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(dir, "up")); err != nil {
		t.Fatal(err)
	}
	s := newShell(t, Config{WorkDir: dir, ShellAllow: []string{"ls", "echo", "git", "find", "true", "cat"}, ShellTrust: []string{"sh"}})
	for _, cmd := range []string{
		"ls -la",
		"echo hi && ls | cat || true",
		`echo "$HOME" '$(id)' \$HOME`,
		"if ls; then echo y; else echo n; fi",
		"for f in a b; do echo $f; done",
		"until true; do ls; done",
		"case x in x) ls;; *) echo;; esac",
		"(ls; echo a)",
		"{ ls; echo a; }",
		"echo $(ls) `echo x`",
		"ls > out.txt 2>&1",
		"cat <<EOF\nhello $(echo x)\nEOF",
		"\\ls",
		"'ls' \"echo\"",
		"git status",
		"git -C sub log --oneline",
		"git config --get user.name",
		"git config user.name",
		"git config --list",
		"git add -u",
		"git log -- *.go",
		"git push -u origin main",
		"find . -name '*.go' -print",
		"sh $SKILL_DIR/scripts/run.sh",
		"! ls",
		"ls &",
	} {
		if err := s.checkAllowed(cmd); err != nil {
			t.Errorf("%q refused: %v", cmd, err)
		}
	}
	for cmd, want := range map[string]string{
		// The bypasses of issue 17.
		`git -c alias.x='!id' x`: "git -c sets configuration",
		"ls () { id; }; ls":      "may not define functions (ls)",
		// Function bodies, subshells, groups and substitutions.
		"f() { ls; }":             "may not define functions",
		"(id)":                    `"id" is not allowed`,
		"( ls; (id) )":            `"id" is not allowed`,
		"{ id; }":                 `"id" is not allowed`,
		"echo $(id)":              `"id" is not allowed`,
		"echo `id`":               `"id" is not allowed`,
		"echo \"$(id)\"":          `"id" is not allowed`,
		"cat <(id)":               "must parse as plain POSIX sh",
		"ls > $(id)":              "target must be written out plainly",
		"cat <<EOF\n$(id)\nEOF":   `"id" is not allowed`,
		"echo ${X:-$(id)}":        `"id" is not allowed`,
		"if true; then id; fi":    `"id" is not allowed`,
		"while id; do ls; done":   `"id" is not allowed`,
		"for x in a; do id; done": `"id" is not allowed`,
		"case a in a) id;; esac":  `"id" is not allowed`,
		"ls & id":                 `"id" is not allowed`,
		"ls || id":                `"id" is not allowed`,
		"ls | id":                 `"id" is not allowed`,
		"i\\d":                    `"id" is not allowed`,
		"i''d":                    `"id" is not allowed`,
		// Computed command names.
		"$X":                 "written out plainly",
		"$(echo ls)":         "written out plainly",
		"l*":                 "written out plainly",
		"~/ls":               "written out plainly",
		`"$X" a`:             "written out plainly",
		"$'\\151d'":          "is not allowed",
		"echo $'\\x'":        "may not use $'...' quoting",
		"[[ -n x ]]":         "written out plainly",
		"((1))":              "", // any refusal
		"let x=1":            `"let" is not allowed`,
		"declare x=1":        "",
		"export X=id":        "",
		"X=1":                "may not set variables (X=...)",
		"PATH=.; ls":         "may not set variables (PATH=...)",
		"./ls":               `"./ls" is not allowed`,
		"/tmp/ls":            `"/tmp/ls" is not allowed`,
		"function f { ls; }": "",
		// Programs that run other programs.
		"eval id":              "eval runs its arguments",
		"exec id":              "exec runs its arguments",
		". ./x":                ". runs its arguments",
		"source x":             "source runs its arguments",
		"command id":           "command runs its arguments",
		"builtin echo":         "builtin runs its arguments",
		"env id":               "env runs its arguments",
		"xargs id":             "xargs runs its arguments",
		"nohup id":             "nohup runs its arguments",
		"setsid id":            "setsid runs its arguments",
		"timeout 1 id":         "timeout runs its arguments",
		"nice id":              "nice runs its arguments",
		"sudo id":              "sudo runs its arguments",
		"su":                   "su runs its arguments",
		"alias ls=id":          "alias runs its arguments",
		"trap id EXIT":         "trap runs its arguments",
		"find . -exec id ;":    "find -exec runs other programs",
		"find . -execdir id +": "find -execdir runs other programs",
		"find . $X":            "find's arguments must be written out plainly",
		"find . -name *":       "unquoted",
		// Environment prefixes.
		"GIT_SSH_COMMAND=id git fetch": "may not set variables (GIT_SSH_COMMAND=...)",
		// git's own ways to run programs.
		"git -cuser.name=x log":                 "git -cuser.name sets configuration",
		"git --config-env=core.pager=X log":     "git --config-env sets configuration",
		"git --exec-path=/tmp log":              "git --exec-path sets",
		"git -C / status":                       "git -C / is outside the base directory",
		"git -C .. status":                      "outside the base directory",
		"git -C up status":                      "outside the base directory",
		"git --git-dir=/etc log":                "git --git-dir is refused",
		"git --work-tree /tmp status":           "git --work-tree is refused",
		"git --git-dir=.git log":                "git --git-dir is refused",
		"git fetch --upload-pa=id origin":       "--upload-pa runs a program",
		"git clone -qu id src dst":              "git clone -u runs a program",
		"git clone -uid src dst":                "git clone -u runs a program",
		"git fetch -c x=y origin":               "sets configuration",
		"git rebase -ix id main":                "runs other programs",
		"git log --help":                        "starts a viewer",
		"git --help":                            "git --help is refused",
		"git help log":                          `"help" is not a git command`,
		"git init --template=/tmp/t":            "--template copies",
		"git clone --templ=/tmp/t x":            "--template copies",
		"git config core.hooksPath /tmp/h":      "git config may only read",
		"git config --add core.pager id":        "git config --add is not a read",
		"git config set core.pager id":          "git config may only read",
		"git config --global alias.x !id":       "git config may only read",
		"git x":                                 `"x" is not a git command`,
		"git difftool -x id":                    `"difftool" is not a git command`,
		"git fetch --upload-pack=id origin":     "--upload-pack runs a program",
		"git fetch --upload-pack id origin":     "--upload-pack runs a program",
		"git clone -u id src dst":               "git clone -u runs a program",
		"git ls-remote -u id origin":            "git ls-remote -u runs a program",
		"git push --receive-pack=id origin":     "--receive-pack runs a program",
		"git archive --exec=id --remote=x HEAD": "--exec runs a program",
		"git clone ext::sh":                     "ext:: transport",
		"git fetch 'ext::sh -c id'":             "ext:: transport",
		"git remote add o EXT::sh":              "ext:: transport",
		"git clone -c core.sshCommand=id x":     "git clone -c sets configuration",
		"git clone --config=core.pager=id x":    "git clone --config sets configuration",
		"git submodule foreach id":              "submodule foreach runs",
		"git rebase -x id main":                 "git rebase -x runs other programs",
		"git rebase --exec=id main":             "--exec runs a program",
		"git bisect run id":                     "bisect run runs",
		"git $X":                                "git's arguments must be written out plainly",
		"git ?c alias.x=!id x":                  "unquoted",
		"git fetch *":                           "unquoted",
		"git {-c,alias.x=!id} x":                "unquoted",
		"echo '[core]' >> .git/config":          `may not write ".git/config" (redirection): .git is protected`,
		"echo x > sub/.git/hooks/post-checkout": `may not write "sub/.git/hooks/post-checkout" (redirection): .git is protected`,
	} {
		err := s.checkAllowed(cmd)
		if err == nil || !strings.HasPrefix(err.Error(), "shell refused: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want a refusal containing %q", cmd, err, want)
		}
	}
}

func TestShellAllowListConfig(t *testing.T) {
	for _, allow := range [][]string{{"env"}, {"ls", "xargs"}, {"/usr/bin/timeout"}, {"a b"}, {"$X"}, {"../ls"}, {""}, {"sh"}, {"python3"}, {"awk"}} {
		if _, err := NewShell(t.Context(), Config{WorkDir: t.TempDir(), ShellAllow: allow}); err == nil {
			t.Errorf("allow-list %q accepted", allow)
		}
	}
	if _, err := NewShell(t.Context(), Config{WorkDir: t.TempDir(), ShellAllow: []string{"git", "/usr/bin/ls"}, ShellTrust: []string{"python3", "g++"}}); err != nil {
		t.Fatal(err)
	}
}
