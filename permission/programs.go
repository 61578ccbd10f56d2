package permission

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolbus/toolbus/shellcmd"
)

// wrappers run the rest of their command line as a program of its own
// (after options and, for env, assignments): a deny rule for the program
// must see it. Each suffix of a wrapper's arguments is a candidate, so
// their options need not be read (a deny rule matching too much is the
// safe error).
var wrappers = map[string]bool{
	"command": true, "builtin": true, "exec": true, "env": true, "nice": true, "nohup": true,
	"setsid": true, "stdbuf": true, "timeout": true, "time": true, "sudo": true, "doas": true,
	"xargs": true, "ionice": true, "chrt": true, "taskset": true, "unbuffer": true, "flock": true,
	"strace": true, "ltrace": true, "busybox": true, "watch": true, "chroot": true, "runuser": true,
	"caffeinate": true, "systemd-run": true, "firejail": true, "fakeroot": true, "proot": true,
	"nsenter": true, "unshare": true, "script": true, "su": true, "parallel": true,
}

// shells run their -c argument as a command; eval runs its arguments.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true,
	"mksh": true, "ash": true, "busybox": true, "su": true, "script": true, "fish": true}

// launches reports whether the simple command part starts with an
// assignment or runs a program that runs its arguments as a command (a
// wrapper, a shell, eval, source): the rule "<first word>:*" would allow
// every program, so it is never suggested
// (session 18, red team: TestAttackLauncherRuleSuggested).
func launches(part string) bool {
	f := strings.Fields(part)
	if len(f) == 0 {
		return false
	}
	if assignment(f[0]) {
		return true // X=1:* allows "X=1 <any program>"
	}
	w := strings.NewReplacer(`'`, "", `"`, "", `\`, "").Replace(f[0])
	w = w[strings.LastIndexByte(w, '/')+1:]
	return wrappers[w] || shells[w] || w == "eval" || w == "source" || w == "."
}

// assignment reports whether a shell word is a variable assignment
// (NAME=...), which a command may put before its program.
func assignment(word string) bool {
	name, _, ok := strings.Cut(word, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		if r != '_' && !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// maxNesting bounds how deep sh -c and eval arguments are read.
const maxNesting = 4

// programs returns what deny and ask rules are matched against besides the
// command's text (looseParts), read from its syntax trees (POSIX sh and
// bash, shellcmd.Parse): every simple command anywhere in it (inside if,
// while, functions, subshells, substitutions, pipelines) as the program
// that runs, its name without a directory ("/bin/rm x" is "rm x") and its
// words without quotes; the program a wrapper runs ("command rm x", "env
// X=1 rm x", "xargs rm"); the commands of a shell's -c argument, of eval's
// arguments and of find's -exec. computed holds the text of the simple
// commands whose program is known only at run time ("$(echo rm) x",
// "${RM:-rm} x", "r$'m'"), and of alias definitions, which rename programs
// for later lines: no deny rule can judge those (session 18, red team).
func programs(cmd string) (out, computed []string) {
	var read func(cmd string, depth int)
	read = func(cmd string, depth int) {
		files, _ := shellcmd.Parse(cmd)
		for _, f := range files {
			syntax.Walk(f, func(n syntax.Node) bool {
				call, ok := n.(*syntax.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				words := make([]string, len(call.Args))
				static := make([]bool, len(call.Args))
				for i, a := range call.Args {
					if w, ok := shellcmd.Static(a); ok {
						words[i], static[i] = w.Value, !w.Glob
					} else {
						words[i] = text(cmd, a)
					}
				}
				if !static[0] {
					computed = append(computed, text(cmd, call))
					return true
				}
				add := func(from int) {
					if from >= len(words) {
						return
					}
					prog := words[from]
					prog = prog[strings.LastIndexByte(prog, '/')+1:]
					out = append(out, normalize(strings.Join(append([]string{prog}, words[from+1:]...), " ")))
					if from > 0 && !static[from] {
						computed = append(computed, text(cmd, call))
					}
				}
				add(0)
				name := words[0][strings.LastIndexByte(words[0], '/')+1:]
				switch {
				case name == "alias" && len(words) > 1:
					computed = append(computed, text(cmd, call))
				case name == "eval" && depth < maxNesting:
					read(strings.Join(words[1:], " "), depth+1)
				case name == "find":
					for i, w := range words {
						if w == "-exec" || w == "-execdir" || w == "-ok" || w == "-okdir" {
							add(i + 1)
						}
					}
				}
				if wrappers[name] {
					for i := 1; i < len(words); i++ {
						add(i)
					}
				}
				if shells[name] && depth < maxNesting {
					for i := 1; i+1 < len(words); i++ {
						if w := words[i]; strings.HasPrefix(w, "-") && !strings.HasPrefix(w, "--") && strings.Contains(w, "c") {
							read(words[i+1], depth+1)
						}
					}
				}
				return true
			})
		}
	}
	read(cmd, 0)
	return out, computed
}

// text is n's text in cmd.
func text(cmd string, n syntax.Node) string {
	a, b := int(n.Pos().Offset()), int(n.End().Offset())
	if a < 0 || b > len(cmd) || a > b {
		return ""
	}
	return cmd[a:b]
}
