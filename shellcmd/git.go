package shellcmd

import (
	"slices"
	"strings"
)

// gitPathWriters are the git subcommands whose operands name files or
// directories they write.
var gitPathWriters = []string{"checkout", "checkout-index", "clone", "init", "mv", "restore", "worktree"}

// checkGit returns the files git's arguments name for writing: the
// operands of the subcommands above, and the values of --output, -o of
// format-patch and archive, --output-directory and --prefix. What git
// writes from a repository's content (a checkout of a commit that holds
// .bashrc) cannot be seen. The allow-list's own git check
// (builtin) refuses the options that run programs.
func checkGit(args []string) ([]Write, error) {
	i := 0
	for ; i < len(args) && strings.HasPrefix(args[i], "-"); i++ {
		opt, _, has := strings.Cut(args[i], "=")
		if !has && slices.Contains([]string{"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env", "--attr-source"}, opt) {
			i++
		}
	}
	if i >= len(args) {
		return nil, nil
	}
	sub, rest := args[i], args[i+1:]
	var out []Write
	operands := slices.Contains(gitPathWriters, sub)
	dashes := false
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		if dashes || !strings.HasPrefix(a, "-") {
			if operands {
				out = append(out, Write{Path: a, By: "git " + sub})
			}
			continue
		}
		if a == "--" {
			dashes = true
			continue
		}
		name, val, has := strings.Cut(a, "=")
		valued := isLong(name, "--output") || isLong(name, "--output-directory") || isLong(name, "--prefix") ||
			(name == "-o" && (sub == "format-patch" || sub == "archive"))
		if !valued {
			continue
		}
		if !has {
			if j+1 >= len(rest) {
				continue
			}
			j++
			val = rest[j]
		}
		out = append(out, Write{Path: val, By: "git " + sub + " " + name})
	}
	return out, nil
}
