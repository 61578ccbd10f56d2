// Package shellcmd reads a shell command's syntax tree (mvdan.cc/sh) for what
// it writes and for options that run programs: the profiles of docs/builtin.md.
package shellcmd

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// grammars are the two readings of a command: POSIX sh (what /bin/sh,
// dash, runs) and bash (in case /bin/sh is bash).
var grammars = []struct {
	name string
	opt  syntax.ParserOption
}{{"sh", syntax.Variant(syntax.LangPOSIX)}, {"bash", syntax.Variant(syntax.LangBash)}}

// Parse parses cmd as POSIX sh and as bash: the trees that parse and the
// first error, named by its grammar.
func Parse(cmd string) (files []*syntax.File, err error) {
	for _, g := range grammars {
		f, perr := parse(g.opt, cmd)
		if errors.Is(perr, ErrTooDeep) {
			return nil, fmt.Errorf("%s: %w", g.name, perr)
		}
		if perr != nil {
			err = cmp.Or(err, fmt.Errorf("%s: %w", g.name, perr))
			continue
		}
		files = append(files, f)
	}
	return files, err
}

// ParseReadings returns the distinct trees of Parse, parsing once when cmd
// holds no text on which the POSIX and bash grammars part (sameReading;
// FuzzParseReadings). err is set when no grammar parses cmd.
func ParseReadings(cmd string) ([]*syntax.File, error) {
	if !sameReading(cmd) {
		files, err := Parse(cmd)
		if len(files) > 0 {
			err = nil
		}
		return files, err
	}
	f, err := parse(grammars[1].opt, cmd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", grammars[1].name, err)
	}
	return []*syntax.File{f}, nil
}

// ErrTooDeep is Parse's error past maxFrames (256 KiB of "(" overflowed the
// stack). Such a command is unread, not unparsable: bash may run it.
var ErrTooDeep = errors.New("the command nests too deep to be read")

// maxFrames bounds the parser's stack in calls (about 200 levels of "("),
// checked at each readChunk read: the stack stays under about 3 MB.
const maxFrames = 5000

// readChunk is the most one read gives the parser (its buffer's size).
const readChunk = 1024

// depthReader feeds the parser cmd and refuses to go on (ErrTooDeep)
// once the goroutine's stack holds maxFrames calls.
type depthReader struct {
	s   string
	off int
	pc  [1]uintptr
}

func (r *depthReader) Read(b []byte) (int, error) {
	if r.off >= len(r.s) {
		return 0, io.EOF
	}
	if runtime.Callers(maxFrames, r.pc[:]) > 0 {
		return 0, ErrTooDeep
	}
	n := copy(b[:min(len(b), readChunk)], r.s[r.off:])
	r.off += n
	return n, nil
}

// parse parses cmd in one grammar, refusing a nesting past maxFrames.
func parse(opt syntax.ParserOption, cmd string) (*syntax.File, error) {
	return syntax.NewParser(opt).Parse(&depthReader{s: cmd}, "")
}

// bashOnly is the text at which mvdan.cc/sh (v3.14) takes a bash-only path
// that POSIX sh would read otherwise; bashWords start a bash clause.
var (
	bashOnly  = []string{"[", "]", "|&", "$'", `$"`, "${", "((", ";&", "<(", ">(", "&>", "<<<", "+=", "=(", "@(", "!(", "+(", "*(", "?(", "\\\n", "\\\r"}
	bashWords = []string{"let", "function", "declare", "local", "export", "readonly", "typeset", "nameref", "time", "coproc", "select"}
)

// sameReading reports whether cmd holds none of bashOnly and none of
// bashWords as a word (not between letters, digits or underscores).
func sameReading(cmd string) bool {
	if slices.ContainsFunc(bashOnly, func(s string) bool { return strings.Contains(cmd, s) }) {
		return false
	}
	for _, w := range bashWords {
		for off := 0; ; {
			i := strings.Index(cmd[off:], w)
			if i < 0 {
				break
			}
			at, end := off+i, off+i+len(w)
			if (at == 0 || !wordByte(cmd[at-1])) && (end == len(cmd) || !wordByte(cmd[end])) {
				return false
			}
			off = at + 1
		}
	}
	return true
}

func wordByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// Word is a word's value when it has no expansion; Glob says that it has an
// unquoted *, ?, [, { or ~ (which the shell may turn into other words).
type Word struct {
	Value string
	Glob  bool
}

// Static returns w's value when w is made only of literal text and quotes
// (no $, no `...`, no $'...').
func Static(w *syntax.Word) (Word, bool) {
	var out Word
	if len(w.Parts) == 1 {
		// A plain literal without backslashes is its own value: no copy.
		if l, ok := w.Parts[0].(*syntax.Lit); ok && strings.IndexByte(l.Value, '\\') < 0 {
			return Word{Value: l.Value, Glob: strings.ContainsAny(l.Value, "*?[{~")}, true
		}
	}
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			v, g := unescape(p.Value, false)
			b.WriteString(v)
			out.Glob = out.Glob || g
		case *syntax.SglQuoted:
			if p.Dollar {
				return Word{}, false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return Word{}, false
			}
			for _, q := range p.Parts {
				lit, ok := q.(*syntax.Lit)
				if !ok {
					return Word{}, false
				}
				v, _ := unescape(lit.Value, true)
				b.WriteString(v)
			}
		default:
			return Word{}, false
		}
	}
	out.Value = b.String()
	return out, true
}

// unescape removes a literal's backslashes and says whether an unescaped
// glob, brace or tilde is left.
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

// Write is a file a command writes (or, for cd, a directory its relative
// writes then land in).
type Write struct {
	// Path is the target as written; "" when computed or unseen.
	Path string
	// By says what writes it: "redirection", "cp", "sed -i", ...
	By string
	// Raw is the target's text in the command, expansions included (for
	// a program's computed write, all its arguments); set by WritesOf.
	Raw string
}

// devices are redirection targets that are not files of the base directory.
var devices = []string{"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero", "/dev/full"}

// RedirectWrite returns the file a redirection writes; ok is false for
// reads, here-documents, descriptor copies and harmless devices.
func RedirectWrite(r *syntax.Redirect) (Write, bool) {
	if r.Word == nil {
		return Write{}, false
	}
	switch r.Op {
	case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.RdrInOut, syntax.RdrAll, syntax.AppAll:
	case syntax.DplOut:
		if w, ok := Static(r.Word); ok && !w.Glob && (w.Value == "-" || isNumber(w.Value)) {
			return Write{}, false
		}
	default:
		return Write{}, false
	}
	w, ok := Static(r.Word)
	if !ok || w.Glob {
		return Write{By: "redirection"}, true
	}
	if slices.Contains(devices, w.Value) {
		return Write{}, false
	}
	return Write{Path: w.Value, By: "redirection"}, true
}

func isNumber(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// WritesOf returns every write of cmd it can see in Parse's trees files:
// redirections and the write operands of profiled programs (Path "" when
// refused or computed, as are relative ones after a cd); each, when set,
// sees every simple command of the walk.
func WritesOf(cmd string, files []*syntax.File, each func(*syntax.CallExpr)) []Write {
	var out []Write
	moved := false
	for _, f := range files {
		syntax.Walk(f, func(n syntax.Node) bool {
			switch n := n.(type) {
			case *syntax.Redirect:
				if w, ok := RedirectWrite(n); ok {
					w.Raw = Text(cmd, n.Word.Pos(), n.Word.End())
					out = append(out, w)
				}
			case *syntax.CallExpr:
				if each != nil {
					each(n)
				}
				ws, cd := callWrites(n)
				for _, w := range ws {
					if w.Path == "" && len(n.Args) > 1 {
						w.Raw = Text(cmd, n.Args[1].Pos(), n.Args[len(n.Args)-1].End())
					} else {
						w.Raw = w.Path
					}
					out = append(out, w)
				}
				moved = moved || cd
			}
			return true
		})
	}
	if moved {
		for i := range out {
			if !strings.HasPrefix(out[i].Path, "/") {
				out[i].Path = ""
			}
		}
	}
	return out
}

// Text is cmd's text from one position of its tree to another; "" when
// they do not lie in cmd.
func Text(cmd string, from, to syntax.Pos) string {
	a, b := int(from.Offset()), int(to.Offset())
	if a < 0 || b > len(cmd) || a > b {
		return ""
	}
	return cmd[a:b]
}

// callWrites returns the writes of one simple command with a profile, and
// whether it changes directory.
func callWrites(n *syntax.CallExpr) ([]Write, bool) {
	if len(n.Args) == 0 {
		return nil, false
	}
	name, ok := Static(n.Args[0])
	if !ok || name.Glob {
		return nil, false
	}
	base := name.Value[strings.LastIndexByte(name.Value, '/')+1:]
	p, ok := Lookup(base)
	if !ok {
		return nil, false
	}
	args, static := make([]string, 0, len(n.Args)-1), true
	for _, a := range n.Args[1:] {
		w, ok := Static(a)
		if !ok || w.Glob {
			static = false
			break
		}
		args = append(args, w.Value)
	}
	cd := base == "cd" || base == "pushd" || base == "popd"
	if static {
		if targets, err := p.Check(args); err == nil {
			return targets, cd
		}
	} else if !p.Plain {
		return nil, cd
	}
	return []Write{{By: base}}, cd // refused, or plain arguments that are not
}

// Protected names, case-insensitive: configuration that can run programs or
// holds credentials, by base name, and directories anywhere in a path.
var (
	protectedFiles = []string{".env", ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".zshrc",
		".zshenv", ".zprofile", ".zlogin", ".kshrc", ".profile", ".gitconfig", ".gitmodules", ".netrc",
		".npmrc", ".pypirc", ".curlrc", ".wgetrc", ".mcp.json", ".envrc"}
	// .claude: an agent host's settings there name hook commands it runs.
	protectedDirs = []string{".git", ".ssh", ".vscode", ".idea", ".aws", ".gnupg", ".claude"}
)

// Protected reports whether p, as written, names a protected file or lies in
// a protected directory, and which name makes it so.
func Protected(p string) (string, bool) {
	segs := strings.Split(filepath.ToSlash(p), "/")
	for _, s := range segs {
		if slices.Contains(protectedDirs, strings.ToLower(s)) {
			return s, true
		}
	}
	last := segs[len(segs)-1]
	base := strings.ToLower(last)
	if slices.Contains(protectedFiles, base) || strings.HasPrefix(base, ".env.") {
		return last, true
	}
	return "", false
}

// ProtectedArg is Protected for a word, a long option's value and every tail
// of a short-option cluster ("-t.git/").
func ProtectedArg(a string) (string, bool) {
	if n, ok := Protected(a); ok {
		return n, true
	}
	if v, ok := strings.CutPrefix(a, "--"); ok {
		if _, val, ok := strings.Cut(v, "="); ok {
			return Protected(val)
		}
		return "", false
	}
	if strings.HasPrefix(a, "-") {
		for i := 1; i < len(a); i++ {
			if n, ok := Protected(a[i:]); ok {
				return n, true
			}
		}
	}
	return "", false
}
