package permission

import (
	"errors"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolbus/toolbus/shellcmd"
)

// wrappers run the rest of their command line as a program, which deny rules
// must see: each suffix of their arguments is a candidate.
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

// launches reports whether part starts with an assignment or a launcher,
// whose "<word>:*" rule would allow anything (TestAttackLauncherRuleSuggested).
func launches(part string) bool {
	if part == "" {
		return false
	}
	first := firstWord(part) // parts are normalized
	if assignment(first) {
		return true // X=1:* allows "X=1 <any program>"
	}
	w := unquoteWord.Replace(first)
	w = w[strings.LastIndexByte(w, '/')+1:]
	return wrappers[w] || shells[w] || w == "eval" || w == "source" || w == "."
}

// unquoteWord removes quotes and backslashes from a word (one Replacer:
// building one per part cost 1.5 GB for a 1 MiB command).
var unquoteWord = strings.NewReplacer(`'`, "", `"`, "", `\`, "")

// assignment reports whether a shell word is a variable assignment (NAME=...).
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

// maxNesting bounds how deep sh -c and eval arguments are read, and
// maxParses how many are (each parse costs some kilobytes).
const (
	maxNesting = 4
	maxParses  = 64
)

// commandPrograms holds a command's syntax trees and programs, read once.
type commandPrograms struct {
	trees    []*syntax.File
	parsed   bool
	deep     bool // the command nests too deep to be parsed (shellcmd.ErrTooDeep)
	list     []string
	computed string // a simple command no rule can judge (named at run time, an alias)
	read     bool
}

// parse parses cmd once (both grammars, one tree when they agree).
func (p *commandPrograms) parse(cmd string) {
	if !p.parsed {
		var err error
		p.trees, err = shellcmd.ParseReadings(cmd)
		p.deep = errors.Is(err, shellcmd.ErrTooDeep)
		p.parsed = true
	}
}

// get returns cmd's programs and the computed one, read on first use.
func (p *commandPrograms) get(cmd string) ([]string, string) {
	if !p.read {
		p.parse(cmd)
		visit, done := readPrograms(cmd)
		for _, f := range p.trees {
			syntax.Walk(f, func(n syntax.Node) bool {
				if call, ok := n.(*syntax.CallExpr); ok {
					visit(call)
				}
				return true
			})
		}
		p.list, p.computed = done()
		p.read = true
	}
	return p.list, p.computed
}

// readPrograms reads every simple command of the trees as the program that
// runs, through wrappers, sh -c, eval and find -exec (docs/permission.md).
// computed is the first command no deny rule can judge (known only at run
// time, an alias, or past the parse budget: TestAttackDenyRuleCost).
func readPrograms(top string) (visit func(*syntax.CallExpr), done func() (out []string, computed string)) {
	var out []string
	var computed string
	budget := 8*len(top) + 4096
	nested := 2*len(top) + 4096 // bytes of -c and eval arguments parsed again
	parses := maxParses
	over := false
	compute := func(s string) {
		if computed == "" {
			computed = cut(s)
		}
	}
	var read func(cmd string, call *syntax.CallExpr, depth int)
	again := func(cmd string, depth int) {
		if depth > maxNesting {
			return
		}
		if nested -= len(cmd); nested < 0 || parses == 0 {
			over = true
			compute(cmd)
			return
		}
		parses--
		files, err := shellcmd.ParseReadings(cmd)
		if errors.Is(err, shellcmd.ErrTooDeep) {
			over = true // its programs cannot be read
			compute(cmd)
			return
		}
		for _, f := range files {
			syntax.Walk(f, func(n syntax.Node) bool {
				if call, ok := n.(*syntax.CallExpr); ok {
					read(cmd, call, depth)
				}
				return !over
			})
		}
	}
	read = func(cmd string, call *syntax.CallExpr, depth int) {
		if over || len(call.Args) == 0 {
			return
		}
		// Most simple commands have a few words: on the stack.
		var wordsBuf [8]string
		var staticBuf [8]bool
		var restBuf [9]int
		words, static, rest := wordsBuf[:0], staticBuf[:0], restBuf[:0]
		if n := len(call.Args); n > len(wordsBuf) {
			words, static, rest = make([]string, 0, n), make([]bool, 0, n), make([]int, 0, n+1)
		}
		words, static = words[:len(call.Args)], static[:len(call.Args)]
		// rest[i] is the length of words[i:] joined by spaces.
		rest = rest[:len(call.Args)+1]
		for i, a := range call.Args {
			if w, ok := shellcmd.Static(a); ok {
				words[i], static[i] = w.Value, !w.Glob
			} else {
				words[i] = text(cmd, a)
			}
		}
		for i := len(words) - 1; i >= 0; i-- {
			rest[i] = rest[i+1] + len(words[i]) + 1
		}
		if !static[0] && words[0] != "[" && words[0] != "[[" { // a lone bracket matches no file: test's name
			compute(text(cmd, call))
			return
		}
		add := func(from int) {
			if over || from >= len(words) {
				return
			}
			if budget -= rest[from]; budget < 0 {
				over = true
				compute(text(cmd, call))
				return
			}
			prog := words[from]
			prog = prog[strings.LastIndexByte(prog, '/')+1:]
			if from+1 < len(words) {
				var b strings.Builder
				b.Grow(rest[from])
				b.WriteString(prog)
				for _, w := range words[from+1:] {
					b.WriteByte(' ')
					b.WriteString(w)
				}
				prog = b.String()
			}
			out = append(out, normalize(prog))
			if from > 0 && !static[from] {
				compute(text(cmd, call))
			}
		}
		add(0)
		name := words[0][strings.LastIndexByte(words[0], '/')+1:]
		switch {
		case name == "alias" && len(words) > 1:
			compute(text(cmd, call))
		case name == "eval":
			again(strings.Join(words[1:], " "), depth+1)
		case name == "find":
			for i, w := range words {
				if w == "-exec" || w == "-execdir" || w == "-ok" || w == "-okdir" {
					add(i + 1)
				}
			}
		}
		if wrappers[name] {
			for i := 1; i < len(words) && !over; i++ {
				add(i)
			}
		}
		if shells[name] {
			for i := 1; i+1 < len(words) && !over; i++ {
				if w := words[i]; strings.HasPrefix(w, "-") && !strings.HasPrefix(w, "--") && strings.Contains(w, "c") {
					again(words[i+1], depth+1)
				}
			}
		}
	}
	return func(call *syntax.CallExpr) { read(top, call, 0) }, func() ([]string, string) { return out, computed }
}

// cut keeps a reason's quote of a command short.
func cut(s string) string {
	if len(s) <= 80 {
		return s
	}
	return strings.ToValidUTF8(s[:80], "") + "..."
}

// text is n's text in cmd.
func text(cmd string, n syntax.Node) string { return shellcmd.Text(cmd, n.Pos(), n.End()) }
