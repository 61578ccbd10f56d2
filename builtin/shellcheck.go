package builtin

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// The allow-list check (docs/builtin.md, "What --shell-allow is and is
// not"). The command is parsed twice, as POSIX sh (what /bin/sh, dash
// here, runs) and as bash (in case /bin/sh is bash), and must pass on both
// trees: a construct the two grammars read differently either fails to
// parse as POSIX or is checked in both readings. Every simple command in
// the tree (pipelines, lists, bodies of if/while/for/case, subshells,
// groups, command and process substitutions, here-documents,
// redirections) is checked; nothing is matched as a string.

// wrappers run their arguments as a program, so an allow-list that held
// one would allow everything; they are refused in the allow-list at start
// and as command names always.
var wrappers = []string{
	".", "alias", "at", "batch", "builtin", "busybox", "chroot", "chrt", "command", "coproc", "crontab",
	"daemonize", "doas", "enable", "env", "eval", "exec", "fc", "flock", "gdb", "hash", "ionice",
	"ltrace", "newgrp", "nice", "nohup", "nsenter", "parallel", "pkexec", "run-parts", "runuser", "script",
	"setpriv", "setsid", "sg", "source", "start-stop-daemon", "stdbuf", "strace", "su", "sudo",
	"systemd-run", "taskset", "time", "timeout", "trap", "unalias", "unshare", "watch", "xargs",
}

// allowName is the shape of an allow-list entry: a program name, or an
// absolute path of one.
var allowName = regexp.MustCompile(`^(/[A-Za-z0-9._+-]+)*/?[A-Za-z0-9_+-][A-Za-z0-9._+-]*$`)

// checkAllowList refuses an allow-list entry that is not a plain program
// name or absolute path, or that names a wrapper.
func checkAllowList(allow []string) error {
	for _, a := range allow {
		if !allowName.MatchString(a) || strings.HasSuffix(a, "/") {
			return fmt.Errorf("--shell-allow: %q is not a program name or an absolute path", a)
		}
		if slices.Contains(wrappers, filepath.Base(a)) {
			return fmt.Errorf("--shell-allow: %s runs its arguments as another program, so it cannot be allow-listed", a)
		}
	}
	return nil
}

// checker checks one command against an allow-list.
type checker struct {
	allow []string
	// inside says whether a path given to git -C, --git-dir or
	// --work-tree is inside the base directory.
	inside func(p string) bool
}

var (
	posixParser = syntax.Variant(syntax.LangPOSIX)
	bashParser  = syntax.Variant(syntax.LangBash)
)

// check parses cmd and checks every command in it; the error is the
// refusal's text.
func (c *checker) check(cmd string) error {
	for _, v := range []struct {
		name string
		opt  syntax.ParserOption
	}{{"sh", posixParser}, {"bash", bashParser}} {
		f, err := syntax.NewParser(v.opt).Parse(strings.NewReader(cmd), "")
		if err != nil {
			return refused("shell refused: with an allow-list the command must parse as plain POSIX sh (%s: %v)", v.name, err)
		}
		if err := c.file(f); err != nil {
			return err
		}
	}
	return nil
}

// file walks the whole tree and checks each node that starts or defines
// something.
func (c *checker) file(f *syntax.File) error {
	var err error
	syntax.Walk(f, func(n syntax.Node) bool {
		if err != nil {
			return false
		}
		err = c.node(n)
		return err == nil
	})
	return err
}

func (c *checker) node(n syntax.Node) error {
	switch n := n.(type) {
	case *syntax.CallExpr:
		return c.call(n)
	case *syntax.FuncDecl:
		name := "a function"
		if n.Name != nil {
			name = n.Name.Value
		}
		return refused("shell refused: with an allow-list the command may not define functions (%s)", name)
	case *syntax.DeclClause:
		return refused("shell refused: with an allow-list the command may not use declare, local, export, readonly or typeset")
	case *syntax.ArithmCmd, *syntax.LetClause, *syntax.TestClause, *syntax.TestDecl, *syntax.CoprocClause:
		return refused("shell refused: with an allow-list the command may not use bash's (( )), let, [[ ]] or coproc")
	case *syntax.SglQuoted:
		if n.Dollar {
			return refused("shell refused: with an allow-list the command may not use $'...' quoting")
		}
	case *syntax.DblQuoted:
		if n.Dollar {
			return refused(`shell refused: with an allow-list the command may not use $"..." quoting`)
		}
	case *syntax.ExtGlob:
		return refused("shell refused: with an allow-list the command may not use extended globs")
	case *syntax.Redirect:
		if n.Word != nil {
			if w, ok := static(n.Word); ok && inGitDir(w.value) {
				return refused("shell refused: with an allow-list the command may not redirect into a .git directory (git's config and hooks run programs)")
			}
		}
	}
	return nil
}

// call checks one simple command: no assignments, a literal command name
// from the allow-list, and the program's own rules.
func (c *checker) call(n *syntax.CallExpr) error {
	if len(n.Assigns) > 0 {
		name := "a variable"
		if a := n.Assigns[0]; a != nil && a.Name != nil {
			name = a.Name.Value
		}
		return refused("shell refused: with an allow-list the command may not set variables (%s=...); they would reach the programs it starts", name)
	}
	if len(n.Args) == 0 {
		return nil
	}
	name, ok := static(n.Args[0])
	if !ok || name.glob {
		return refused("shell refused: with an allow-list every command name must be written out plainly, not computed or globbed")
	}
	if slices.Contains(wrappers, name.value) {
		return refused("shell refused: %s runs its arguments as another program, which an allow-list cannot check", name.value)
	}
	if !slices.Contains(c.allow, name.value) {
		return refused("shell refused: the program %q is not allowed; allowed programs: %s", name.value, strings.Join(c.allow, ", "))
	}
	switch filepath.Base(name.value) {
	case "git":
		return c.git(n.Args[1:])
	case "find":
		return checkFind(n.Args[1:])
	}
	return nil
}

// word is a word's value when it has no expansion; glob says that it has
// an unquoted *, ?, [ or { (which the shell may turn into other words).
type word struct {
	value string
	glob  bool
}

// static returns w's value when w is made only of literal text and quotes.
func static(w *syntax.Word) (word, bool) {
	var out word
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			v, g := unescape(p.Value, false)
			b.WriteString(v)
			out.glob = out.glob || g
		case *syntax.SglQuoted:
			if p.Dollar {
				return word{}, false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return word{}, false
			}
			for _, q := range p.Parts {
				lit, ok := q.(*syntax.Lit)
				if !ok {
					return word{}, false
				}
				v, _ := unescape(lit.Value, true)
				b.WriteString(v)
			}
		default:
			return word{}, false
		}
	}
	out.value = b.String()
	return out, true
}

// unescape removes the shell's backslashes from a literal (inside double
// quotes only before $ ` " \ and newline) and says whether an unescaped
// glob or brace character is left.
func unescape(s string, quoted bool) (string, bool) {
	var b strings.Builder
	glob := false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch == '\\' && i+1 < len(s) {
			n := s[i+1]
			if !quoted || strings.IndexByte("$`\"\\\n", n) >= 0 {
				i++
				if n != '\n' {
					b.WriteByte(n)
				}
				continue
			}
		}
		if !quoted && strings.IndexByte("*?[{~", ch) >= 0 {
			glob = true
		}
		b.WriteByte(ch)
	}
	return b.String(), glob
}

// staticArgs returns the values of args, refusing an expansion anywhere
// and a glob before "--" (a file named "-c" or "--upload-pack=x" would
// become an option).
func staticArgs(prog string, args []*syntax.Word) ([]string, error) {
	out := make([]string, 0, len(args))
	dashes := false
	for _, a := range args {
		w, ok := static(a)
		if !ok {
			return nil, refused("shell refused: with an allow-list %s's arguments must be written out plainly (no $, `...` or $(...)); its options decide what it runs", prog)
		}
		if w.glob && !dashes {
			return nil, refused("shell refused: with an allow-list %s's arguments may not hold unquoted *, ?, [, { or ~ before --, since a file name could become an option; quote them or put them after --", prog)
		}
		if w.value == "--" {
			dashes = true
		}
		out = append(out, w.value)
	}
	return out, nil
}

// checkFind refuses find's actions that run programs.
func checkFind(args []*syntax.Word) error {
	vals, err := staticArgs("find", args)
	if err != nil {
		return err
	}
	for _, v := range vals {
		switch v {
		case "-exec", "-execdir", "-ok", "-okdir":
			return refused("shell refused: find %s runs other programs, which an allow-list cannot check", v)
		}
	}
	return nil
}

// gitCommands are the git subcommands the allow-list lets through; any
// other word (an alias, a git-<name> program on PATH, difftool, mergetool,
// filter-branch, daemon ...) is refused.
var gitCommands = []string{
	"add", "am", "annotate", "apply", "archive", "bisect", "blame", "branch", "bundle", "cat-file",
	"check-attr", "check-ignore", "check-mailmap", "check-ref-format", "checkout", "checkout-index",
	"cherry", "cherry-pick", "clean", "clone", "column", "commit", "commit-graph", "commit-tree",
	"config", "count-objects", "describe", "diff", "diff-files", "diff-index", "diff-tree", "fetch",
	"for-each-ref", "format-patch", "fsck", "gc", "grep", "hash-object", "init", "log",
	"ls-files", "ls-remote", "ls-tree", "merge", "merge-base", "merge-file", "merge-tree", "mktag",
	"mktree", "mv", "name-rev", "notes", "prune", "pull", "push", "range-diff", "read-tree", "rebase",
	"reflog", "remote", "repack", "replace", "reset", "restore", "rev-list", "rev-parse", "revert",
	"rm", "shortlog", "show", "show-branch", "show-ref", "sparse-checkout", "stash", "status",
	"stripspace", "submodule", "switch", "symbolic-ref", "tag", "update-index", "update-ref",
	"var", "verify-commit", "verify-pack", "verify-tag", "version", "whatchanged", "worktree", "write-tree",
}

// git checks git's global options and its subcommand's: no -c,
// --config-env or --exec-path, -C/--git-dir/--work-tree only inside the
// base directory, a known subcommand (so no alias), no config writes, no
// program-running options (--upload-pack, --receive-pack, --exec, -x,
// submodule foreach, bisect run) and no ext:: transport.
func (c *checker) git(args []*syntax.Word) error {
	vals, err := staticArgs("git", args)
	if err != nil {
		return err
	}
	for _, v := range vals {
		if strings.Contains(strings.ToLower(v), "ext::") {
			return refused("shell refused: git's ext:: transport runs programs")
		}
	}
	i := 0
	for ; i < len(vals) && strings.HasPrefix(vals[i], "-"); i++ {
		opt, val, hasVal := strings.Cut(vals[i], "=")
		switch {
		case strings.HasPrefix(vals[i], "-c") || opt == "--config-env" || opt == "--exec-path":
			return refused("shell refused: git %s sets configuration or the program path, which can run any program", opt)
		case opt == "--git-dir" || opt == "--work-tree" || opt == "--help" || opt == "-h":
			// An explicit repository could be any directory the agent
			// filled with a config; --help starts a viewer from config.
			return refused("shell refused: with an allow-list git %s is refused (git -C <dir> inside the base directory is allowed)", opt)
		case opt == "-C":
			if !hasVal {
				if i+1 >= len(vals) {
					return refused("shell refused: git %s needs a directory", opt)
				}
				i++
				val = vals[i]
			}
			if c.inside == nil || !c.inside(val) {
				return refused("shell refused: git %s %s is outside the base directory", opt, val)
			}
		case strings.HasPrefix(vals[i], "-C"):
			if c.inside == nil || !c.inside(strings.TrimPrefix(vals[i], "-C")) {
				return refused("shell refused: git %s is outside the base directory", vals[i])
			}
		case opt == "--namespace" || opt == "--super-prefix" || opt == "--attr-source":
			if !hasVal {
				i++
			}
		}
	}
	if i >= len(vals) {
		return nil // git, git --version, git --help
	}
	sub, rest := vals[i], vals[i+1:]
	if !slices.Contains(gitCommands, sub) {
		return refused("shell refused: %q is not a git command this allow-list lets through (aliases and external git-* programs are refused)", sub)
	}
	return gitSubcommand(sub, rest)
}

// longOpt says whether opt is the long option full or an abbreviation of
// it (git's parse-options accepts unique prefixes).
func longOpt(opt, full string) bool {
	return len(opt) > 3 && strings.HasPrefix(opt, "--") && strings.HasPrefix(full, opt)
}

// shortOpt says whether a (a cluster of short options such as -qu) holds
// the letter c.
func shortOpt(a string, c byte) bool {
	return len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.IndexByte(a[1:], c) >= 0
}

// gitSubcommand checks the options of one git subcommand.
func gitSubcommand(sub string, args []string) error {
	var first string
	remote := sub == "clone" || sub == "ls-remote" || sub == "fetch" || sub == "pull" || sub == "push" || sub == "archive" || sub == "submodule"
	for _, a := range args {
		if a == "--" {
			break
		}
		if first == "" && !strings.HasPrefix(a, "-") {
			first = a
		}
		opt, _, _ := strings.Cut(a, "=")
		switch {
		case longOpt(opt, "--upload-pack") || longOpt(opt, "--receive-pack") || longOpt(opt, "--exec") || longOpt(opt, "--extcmd"):
			return refused("shell refused: git %s %s runs a program of the caller's choosing", sub, opt)
		case longOpt(opt, "--help"):
			return refused("shell refused: git %s --help starts a viewer that config chooses", sub)
		case longOpt(opt, "--template"):
			return refused("shell refused: git %s --template copies hooks and config from anywhere", sub)
		case shortOpt(a, 'u') && (sub == "clone" || sub == "ls-remote"):
			return refused("shell refused: git %s -u runs a program of the caller's choosing", sub)
		case (shortOpt(a, 'c') || longOpt(opt, "--config")) && remote:
			return refused("shell refused: git %s %s sets configuration, which can run any program", sub, opt)
		case shortOpt(a, 'x') && sub == "rebase":
			return refused("shell refused: git %s %s runs other programs", sub, opt)
		}
	}
	switch {
	case sub == "submodule" && first == "foreach":
		return refused("shell refused: git submodule foreach runs other programs")
	case sub == "bisect" && first == "run":
		return refused("shell refused: git bisect run runs other programs")
	case sub == "config":
		return gitConfigRead(args)
	}
	return nil
}

// gitConfigRead lets git config only read: --get, --get-all,
// --get-regexp, --list/-l, "get", "list", or one key.
func gitConfigRead(args []string) error {
	readOpts := []string{"--get", "--get-all", "--get-regexp", "--list", "-l", "--show-origin", "--show-scope",
		"--local", "--global", "--system", "--worktree", "--name-only", "-z", "--null", "--includes", "--no-includes",
		"--type=bool", "--type=int", "--type=path", "--bool", "--int", "--path"}
	var pos []string
	verb := false
	for _, a := range args {
		switch {
		case slices.Contains(readOpts, a):
			if strings.HasPrefix(a, "--get") || a == "--list" || a == "-l" {
				verb = true
			}
		case strings.HasPrefix(a, "-"):
			return refused("shell refused: git config %s is not a read; with an allow-list git config may only read", a)
		default:
			pos = append(pos, a)
		}
	}
	switch {
	case verb && len(pos) <= 2:
		return nil
	case !verb && len(pos) == 1 && pos[0] != "set" && pos[0] != "unset" && pos[0] != "edit":
		return nil
	case !verb && len(pos) >= 1 && (pos[0] == "get" || pos[0] == "list") && len(pos) <= 3:
		return nil
	}
	return refused("shell refused: with an allow-list git config may only read (--get, --list, get, list or one key)")
}
