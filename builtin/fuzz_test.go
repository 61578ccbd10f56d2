package builtin

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

var fuzzAllow = []string{"ls", "echo", "git", "cat"}

// FuzzShellCheck: the checker never panics, and whatever it accepts has,
// by an independent reading (mvdan's own expander, on both grammars), only
// allow-listed command names, no assignments and no functions.
func FuzzShellCheck(f *testing.F) {
	for _, s := range []string{
		"ls -la", "echo hi && ls | cat", `git -c alias.x='!id' x`, "ls () { id; }; ls", "(id)", "{ id; }",
		"echo $(id)", "echo `id`", "cat <(id)", "X=1 ls", "$X", "l\\s", "'l's", `"ls"`, "i''d", "eval id",
		"cat <<EOF\n$(id)\nEOF", "if ls; then id; fi", "for x in a; do $x; done", "git fetch --upload-pack=id",
		"ls; ls & ls || ls", "echo ${X:-$(id)}", "$'\\151d'", "git -C .. status", "case a in a) id;; esac",
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
				}
				return true
			})
		}
	})
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
		defer fs.Close()
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
