package builtin

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

var fuzzAllow = []string{"ls", "echo", "git", "cat", "sed", "tar", "cp", "tee", "find"}

// fuzzProtected are names no accepted command may write, by an
// independent reading (not shellcmd's list).
func fuzzProtected(p string) bool {
	segs := strings.Split(strings.ToLower(p), "/")
	for _, s := range segs {
		if s == ".git" {
			return true
		}
	}
	last := segs[len(segs)-1]
	return last == ".gitconfig" || last == ".bashrc" || last == ".profile"
}

// FuzzShellCheck: the checker never panics, and whatever it accepts has,
// by an independent reading (mvdan's own expander, on both grammars), only
// allow-listed command names, no assignments and no functions.
func FuzzShellCheck(f *testing.F) {
	for _, s := range []string{
		"ls -la", "echo hi && ls | cat", `git -c alias.x='!id' x`, "ls () { id; }; ls", "(id)", "{ id; }",
		"echo $(id)", "echo `id`", "cat <(id)", "X=1 ls", "$X", "l\\s", "'l's", `"ls"`, "i''d", "eval id",
		"cat <<EOF\n$(id)\nEOF", "if ls; then id; fi", "for x in a; do $x; done", "git fetch --upload-pack=id",
		"ls; ls & ls || ls", "echo ${X:-$(id)}", "$'\\151d'", "git -C .. status", "case a in a) id;; esac",
		// Issue 26's write and execute forms.
		"cat x > .gitconfig", "echo x >> .git/config", `echo > "$HOME/.git/x"`, "echo > $PWD/.git/x", "cp x .git/config",
		"cp -t.git/ x", "tee .bashrc", "sed -i s/a/b/ .git/config", "sed 'w .git/config' x", "sed e x", "sed 's/x/id/e' x",
		"tar -cf ./.git/x .", "tar -I id -cf a .", "tar --use-compress-program=id -cf a .", "tar cf a --to-command=id .",
		"tar --checkpoint-action=exec=id -cf a .", "tar xf a", "find . -fprint .git/x", "find . -fls x", "find . -exec id ;",
		"git -C r3 checkout-index -f --prefix=.git/ config", "echo x >& .git/x", "cat x > .GIT/config", "cp -- x .g*",
		// The held-out attacker's forms (issue 26).
		"sed -i'r3/.git/hooks/*' -e '' pre-commit", "sed --in-place='r3/.git/*' -e '' config", "git -C r5 --bare checkout-index -f -a",
		"gzip -d .bashrc.gz", "gzip -d -S zz .mcp.jsonzz", "mv -b --suffix=e z .profil", "cp -- x r3/[.]git/config",
		"git grep -Oid x", "split --filter=id x", "install --strip-program=id x y", "printf x > .envrc",
	} {
		f.Add(s)
	}
	c := &checker{allow: fuzzAllow, inside: func(p string) bool { return !filepath.IsAbs(p) && !strings.Contains(p, "..") }}
	f.Fuzz(func(t *testing.T, cmd string) {
		if c.check(cmd) != nil {
			return
		}
		for _, lang := range []syntax.LangVariant{syntax.LangPOSIX, syntax.LangBash} {
			file, err := syntax.NewParser(syntax.Variant(lang)).Parse(strings.NewReader(cmd), "")
			if err != nil {
				t.Fatalf("accepted %q, which does not parse as %v: %v", cmd, lang, err)
			}
			syntax.Walk(file, func(n syntax.Node) bool {
				switch n := n.(type) {
				case *syntax.FuncDecl:
					t.Fatalf("accepted %q, which defines a function", cmd)
				case *syntax.CallExpr:
					if len(n.Assigns) > 0 {
						t.Fatalf("accepted %q, which assigns", cmd)
					}
					if len(n.Args) == 0 {
						break
					}
					fields, err := expand.Fields(&expand.Config{Env: expand.ListEnviron()}, n.Args[0])
					if err != nil || len(fields) != 1 || !slices.Contains(fuzzAllow, fields[0]) {
						t.Fatalf("accepted %q, which starts %q (%v)", cmd, fields, err)
					}
					fuzzCheckArgs(t, cmd, fields[0], n.Args[1:])
				case *syntax.Redirect:
					switch n.Op {
					case syntax.RdrOut, syntax.AppOut, syntax.ClbOut, syntax.RdrInOut, syntax.RdrAll, syntax.AppAll, syntax.DplOut:
						v, err := expand.Literal(&expand.Config{Env: expand.ListEnviron()}, n.Word)
						if err != nil || fuzzProtected(v) || (n.Op != syntax.DplOut && !fuzzLiteral(n.Word)) {
							t.Fatalf("accepted %q, which writes %q (%v)", cmd, v, err)
						}
					}
				}
				return true
			})
		}
	})
}

// fuzzSedS is a plain s command with the e or w flag.
var fuzzSedS = regexp.MustCompile(`^s/[^/\\]*/[^/\\]*/[gpIiMm0-9]*[ew]`)

// fuzzLiteral says whether w holds no expansion at all.
func fuzzLiteral(w *syntax.Word) bool {
	ok := true
	syntax.Walk(w, func(n syntax.Node) bool {
		switch n.(type) {
		case *syntax.ParamExp, *syntax.CmdSubst, *syntax.ArithmExp, *syntax.ProcSubst, *syntax.ExtGlob:
			ok = false
		}
		return ok
	})
	return ok
}

// fuzzCheckArgs: an accepted cp or tee writes no protected name; an
// accepted tar, find or sed uses none of the options that run programs or
// write files of the caller's choosing.
func fuzzCheckArgs(t *testing.T, cmd, prog string, words []*syntax.Word) {
	var args []string
	for _, w := range words {
		v, err := expand.Literal(&expand.Config{Env: expand.ListEnviron()}, w)
		if err != nil {
			return
		}
		args = append(args, v)
	}
	for _, a := range args {
		bad := false
		switch prog {
		case "cp", "tee":
			bad = fuzzProtected(a) || strings.HasPrefix(a, "-") && fuzzProtected(strings.TrimLeft(a[min(2, len(a)):], "="))
		case "tar":
			name, _, _ := strings.Cut(a, "=")
			for _, full := range []string{"--to-command", "--use-compress-program", "--checkpoint-action", "--info-script", "--new-volume-script", "--rsh-command", "--rmt-command", "--extract"} {
				// GNU tar takes any unambiguous abbreviation.
				bad = bad || len(name) > 2 && strings.HasPrefix(full, name) && len(name) >= len("--to-c")
			}
			bad = bad || len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsAny(a, "IFx")
		case "find":
			bad = slices.Contains([]string{"-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls"}, a)
		case "sed":
			bad = a == "e" || strings.HasPrefix(a, "e ") || strings.HasPrefix(a, "w ") || fuzzSedS.MatchString(a)
		}
		if bad {
			t.Fatalf("accepted %q, whose %s takes %q", cmd, prog, a)
		}
	}
}

// FuzzResolve: whatever the path and the symlink planted in the base
// directory (dangling, absolute, a loop ...), the resolver's answer lies
// inside the base directory, and a write through it changes nothing
// outside.
func FuzzResolve(f *testing.F) {
	for _, s := range [][2]string{
		{"a.txt", "x"}, {"../outside.txt", "x"}, {"l", "../outside.txt"}, {"l/new", ".."}, {"l", "/etc/passwd"},
		{"l", "l"}, {"l/x", "."}, {"sub/../l", "a.txt"}, {"l", "../planted"}, {"/abs", "x"}, {"l/../../x", "sub"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, p, target string) {
		if strings.ContainsRune(target, 0) || target == "" || len(p) > 200 || len(target) > 200 {
			return
		}
		root := t.TempDir()
		base := filepath.Join(root, "base")
		mustWrite(t, filepath.Join(base, "a.txt"), "a")
		mustWrite(t, filepath.Join(base, "sub", "b.txt"), "b")
		mustWrite(t, filepath.Join(root, "outside.txt"), "secret")
		if err := os.Symlink(target, filepath.Join(base, "l")); err != nil {
			return
		}
		fs, err := NewFiles(base)
		if err != nil {
			t.Fatal(err)
		}
		defer fs.root.Close()
		rel, err := fs.resolve("write_file", p)
		if err == nil {
			full := filepath.Join(fs.Base(), rel)
			if filepath.IsAbs(rel) || !within(fs.Base(), full) {
				t.Fatalf("resolve(%q) with l -> %q = %q, outside", p, target, rel)
			}
		}
		_, _, _ = fs.Write(nil, WriteIn{Path: p, Content: "pwned"})
		entries, _ := os.ReadDir(root)
		if len(entries) != 2 {
			t.Fatalf("write_file(%q) with l -> %q created something outside: %v", p, target, entries)
		}
		if b, _ := os.ReadFile(filepath.Join(root, "outside.txt")); string(b) != "secret" {
			t.Fatalf("write_file(%q) with l -> %q changed a file outside", p, target)
		}
	})
}
