package builtin

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/shellcmd"
	"mvdan.cc/sh/v3/syntax"
)

// The allow-list check (docs/builtin.md, "What --shell-allow is and is
// not"): the command is parsed as POSIX sh and as bash and must pass on both
// trees, every simple command anywhere in them checked; nothing is matched
// as a string.

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
// name or absolute path, that names a wrapper, or that has no profile
// (shellcmd) unless it is trusted; trusted entries are checked for their
// shape and wrappers alike.
func checkAllowList(allow, trust []string) error {
	for _, list := range []struct {
		flag  string
		names []string
	}{{"--shell-allow", allow}, {"--shell-trust", trust}} {
		for _, a := range list.names {
			if !allowName.MatchString(a) || strings.HasSuffix(a, "/") {
				return fmt.Errorf("%s: %q is not a program name or an absolute path", list.flag, a)
			}
			if slices.Contains(wrappers, filepath.Base(a)) {
				return fmt.Errorf("%s: %s runs its arguments as another program, so it cannot be allow-listed", list.flag, a)
			}
		}
	}
	for _, a := range allow {
		if _, ok := shellcmd.Lookup(filepath.Base(a)); !ok && !slices.Contains(trust, a) {
			return fmt.Errorf("--shell-allow: toolbus has no profile of %s (which of its options run programs or write files), so the allow-list cannot hold it; "+
				"list it under --shell-trust instead to let commands start it with any arguments, trusting it with anything (docs/builtin.md)", a)
		}
	}
	return nil
}

// checker checks one command against an allow-list.
type checker struct {
	allow []string
	// trust are programs started with any arguments, unchecked.
	trust []string
	// inside says whether a path given to git -C, --git-dir or
	// --work-tree is inside the base directory.
	inside func(p string) bool
	// resolve returns a path (relative to the base directory, or
	// absolute) with the symlinks that exist now resolved, relative to the
	// base directory; an error for a path outside it. nil: no resolution.
	resolve func(p string) (string, error)
}

// check parses cmd and walks each tree, checking every node that starts
// or defines something; the error is the refusal's text.
func (c *checker) check(cmd string) error {
	files, err := shellcmd.Parse(cmd)
	if err != nil {
		return fmt.Errorf("shell refused: with an allow-list the command must parse as plain POSIX sh (%v)", err)
	}
	for _, f := range files {
		syntax.Walk(f, func(n syntax.Node) bool {
			if err == nil {
				err = c.node(n)
			}
			return err == nil
		})
	}
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
		return fmt.Errorf("shell refused: with an allow-list the command may not define functions (%s)", name)
	case *syntax.DeclClause:
		return fmt.Errorf("shell refused: with an allow-list the command may not use declare, local, export, readonly or typeset")
	case *syntax.ArithmCmd, *syntax.LetClause, *syntax.TestClause, *syntax.TestDecl, *syntax.CoprocClause:
		return fmt.Errorf("shell refused: with an allow-list the command may not use bash's (( )), let, [[ ]] or coproc")
	case *syntax.SglQuoted:
		if n.Dollar {
			return fmt.Errorf("shell refused: with an allow-list the command may not use $'...' quoting")
		}
	case *syntax.DblQuoted:
		if n.Dollar {
			return fmt.Errorf(`shell refused: with an allow-list the command may not use $"..." quoting`)
		}
	case *syntax.ExtGlob:
		return fmt.Errorf("shell refused: with an allow-list the command may not use extended globs")
	case *syntax.Redirect:
		if w, ok := shellcmd.RedirectWrite(n); ok {
			if w.Path == "" {
				return fmt.Errorf("shell refused: with an allow-list a redirection's target must be written out plainly (no $, glob or ~), so that the check sees which file it writes")
			}
			return c.writable(w)
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
		return fmt.Errorf("shell refused: with an allow-list the command may not set variables (%s=...); they would reach the programs it starts", name)
	}
	if len(n.Args) == 0 {
		return nil
	}
	name, ok := shellcmd.Static(n.Args[0])
	if !ok || name.Glob {
		return fmt.Errorf("shell refused: with an allow-list every command name must be written out plainly, not computed or globbed")
	}
	if slices.Contains(wrappers, name.Value) {
		return fmt.Errorf("shell refused: %s runs its arguments as another program, which an allow-list cannot check", name.Value)
	}
	if slices.Contains(c.trust, name.Value) {
		return nil // trusted with anything
	}
	if !slices.Contains(c.allow, name.Value) {
		return fmt.Errorf("shell refused: the program %q is not allowed; allowed programs: %s", name.Value, strings.Join(append(slices.Clone(c.allow), c.trust...), ", "))
	}
	prog := filepath.Base(name.Value)
	p, ok := shellcmd.Lookup(prog)
	if !ok {
		return fmt.Errorf("shell refused: toolbus has no profile of %s, so an allow-list cannot hold it (the operator may trust it with --shell-trust)", name.Value)
	}
	vals, err := staticArgs(prog, n.Args[1:], p.Plain)
	if err != nil {
		return err
	}
	switch prog {
	case "split":
		err = splitPrefix(vals)
	case "gzip":
		err = c.writes(shellcmd.GzipHidden, vals)
	case "git":
		err = c.git(vals)
		for _, a := range vals {
			if pn, bad := shellcmd.ProtectedArg(a); bad && err == nil {
				err = fmt.Errorf("shell refused: with an allow-list git may not be given %q: %s is protected (git or a shell reads it as configuration that can run programs)", a, pn)
			}
		}
	}
	if err != nil {
		return err
	}
	return c.writes(p.Check, vals)
}

// writes checks vals with check (a profile's) and refuses a write into a
// protected path.
func (c *checker) writes(check func([]string) ([]shellcmd.Write, error), vals []string) error {
	writes, err := check(vals)
	if err != nil {
		return fmt.Errorf("shell refused: %v", err)
	}
	for _, w := range writes {
		if err := c.writable(w); err != nil {
			return err
		}
	}
	return nil
}

// writable refuses a write into a protected path, as written or with the
// symlinks that exist now resolved.
func (c *checker) writable(w shellcmd.Write) error {
	if w.Path == "" {
		return fmt.Errorf("shell refused: with an allow-list %s's target must be written out plainly, so that the check sees which file it writes", w.By)
	}
	name, bad := shellcmd.Protected(w.Path)
	if !bad && c.resolve != nil {
		if r, err := c.resolve(w.Path); err == nil {
			name, bad = shellcmd.Protected(r)
		}
	}
	if bad {
		return fmt.Errorf("shell refused: with an allow-list the command may not write %q (%s): %s is protected, since git or a shell reads it as configuration that can run programs", w.Path, w.By, name)
	}
	return nil
}

// splitPrefix refuses a split whose words hold a name starting with a dot:
// split names outputs prefix + a suffix, so ".gi" makes .git. Every
// protected name starts with a dot, so any such word is refused
// (--additional-suffix .txt too: write it with =).
func splitPrefix(vals []string) error {
	for _, v := range vals {
		last := v[strings.LastIndexByte(v, '/')+1:]
		if strings.HasPrefix(last, ".") && last != "." && last != ".." {
			return fmt.Errorf("shell refused: with an allow-list split's prefix may not start with a dot (%q): the names it makes from it (the prefix and aa, ab ...) can be protected (.gi and t is .git)", v)
		}
	}
	return nil
}

// staticArgs returns the values of args, refusing an expansion anywhere
// and a glob before "--" (a file named "-c" or "--upload-pack=x" would
// become an option). Unless plain (readers, cd: their arguments need not
// be plain) an expanded or globbed word is left out instead: only the
// plain ones go through the program's profile.
func staticArgs(prog string, args []*syntax.Word, plain bool) ([]string, error) {
	out := make([]string, 0, len(args))
	dashes := false
	for _, a := range args {
		w, ok := shellcmd.Static(a)
		switch {
		case !plain && (!ok || w.Glob):
			continue
		case !ok:
			return nil, fmt.Errorf("shell refused: with an allow-list %s's arguments must be written out plainly (no $, `...` or $(...)); its options decide what it runs", prog)
		case w.Glob && !dashes:
			return nil, fmt.Errorf("shell refused: with an allow-list %s's arguments may not hold unquoted *, ?, [, { or ~ before --, since a file name could become an option; quote them or put them after --", prog)
		case w.Glob && dotGlob(w.Value):
			return nil, fmt.Errorf("shell refused: with an allow-list %s's arguments may not hold a pattern that can match a name starting with a dot (%s), nor braces or ~; write the names out", prog, w.Value)
		}
		if w.Value == "--" {
			dashes = true
		}
		out = append(out, w.Value)
	}
	return out, nil
}

// dotGlob says whether the glob word v could expand to a name starting
// with a dot (a component that starts with ".", a backslash or a bracket
// expression), or holds a brace or tilde expansion, which make any name.
// A bracket first can match the dot: the interpreter expanded
// r3/[.]git/config to r3/.git/config (issue 26, held-out attack).
func dotGlob(v string) bool {
	return strings.ContainsAny(v, "{~") || slices.ContainsFunc(strings.Split(v, "/"), func(seg string) bool {
		return strings.HasPrefix(seg, ".") && seg != "." && seg != ".." || strings.HasPrefix(seg, "\\") || strings.HasPrefix(seg, "[")
	})
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
func (c *checker) git(vals []string) error {
	for _, v := range vals {
		if strings.Contains(strings.ToLower(v), "ext::") {
			return fmt.Errorf("shell refused: git's ext:: transport runs programs")
		}
	}
	i := 0
	for ; i < len(vals) && strings.HasPrefix(vals[i], "-"); i++ {
		opt, val, hasVal := strings.Cut(vals[i], "=")
		switch {
		case strings.HasPrefix(vals[i], "-c") || opt == "--config-env" || opt == "--exec-path":
			return fmt.Errorf("shell refused: git %s sets configuration or the program path, which can run any program", opt)
		case opt == "--git-dir" || opt == "--work-tree" || opt == "--help" || opt == "-h" || opt == "--bare":
			// An explicit repository could be any directory the agent
			// filled with a config (--bare makes -C's directory one: a
			// bare repository whose config, written by the agent, sets
			// core.worktree to another repository's .git); --help starts
			// a viewer from config.
			return fmt.Errorf("shell refused: with an allow-list git %s is refused (git -C <dir> inside the base directory is allowed)", opt)
		case opt == "-C":
			if !hasVal {
				if i+1 >= len(vals) {
					return fmt.Errorf("shell refused: git %s needs a directory", opt)
				}
				i++
				val = vals[i]
			}
			if c.inside == nil || !c.inside(val) {
				return fmt.Errorf("shell refused: git %s %s is outside the base directory", opt, val)
			}
			if err := c.writable(shellcmd.Write{Path: val, By: "git -C"}); err != nil {
				return err
			}
		case strings.HasPrefix(vals[i], "-C"):
			if c.inside == nil || !c.inside(strings.TrimPrefix(vals[i], "-C")) {
				return fmt.Errorf("shell refused: git %s is outside the base directory", vals[i])
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
		return fmt.Errorf("shell refused: %q is not a git command this allow-list lets through (aliases and external git-* programs are refused)", sub)
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
			return fmt.Errorf("shell refused: git %s %s runs a program of the caller's choosing", sub, opt)
		case longOpt(opt, "--help"):
			return fmt.Errorf("shell refused: git %s --help starts a viewer that config chooses", sub)
		case longOpt(opt, "--template"):
			return fmt.Errorf("shell refused: git %s --template copies hooks and config from anywhere", sub)
		case sub == "checkout-index" && longOpt(opt, "--prefix"):
			return fmt.Errorf("shell refused: git checkout-index --prefix writes files wherever the prefix leads, through symlinks in it too (issue 26 wrote .git/config so)")
		case longOpt(opt, "--separate-git-dir"):
			return fmt.Errorf("shell refused: git %s %s puts the repository's config where its name does not say .git", sub, opt)
		case shortOpt(a, 'u') && (sub == "clone" || sub == "ls-remote"):
			return fmt.Errorf("shell refused: git %s -u runs a program of the caller's choosing", sub)
		case (shortOpt(a, 'c') || longOpt(opt, "--config")) && remote:
			return fmt.Errorf("shell refused: git %s %s sets configuration, which can run any program", sub, opt)
		case sub == "grep" && (shortOpt(a, 'O') || longOpt(opt, "--open-files-in-pager")):
			return fmt.Errorf("shell refused: git grep %s runs a program of the caller's choosing", opt)
		case shortOpt(a, 'x') && sub == "rebase":
			return fmt.Errorf("shell refused: git %s %s runs other programs", sub, opt)
		}
	}
	switch {
	case sub == "submodule" && first == "foreach":
		return fmt.Errorf("shell refused: git submodule foreach runs other programs")
	case sub == "bisect" && first == "run":
		return fmt.Errorf("shell refused: git bisect run runs other programs")
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
			return fmt.Errorf("shell refused: git config %s is not a read; with an allow-list git config may only read", a)
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
	return fmt.Errorf("shell refused: with an allow-list git config may only read (--get, --list, get, list or one key)")
}
