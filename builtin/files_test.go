package builtin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDanglingSymlink(t *testing.T) {
	f, base, outside := newFiles(t)
	target := filepath.Join(filepath.Dir(outside), "planted.txt") // does not exist
	for name, link := range map[string]string{"abs": target, "rel": "../planted.txt", "chain": "hop"} {
		if err := os.Symlink(link, filepath.Join(base, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../planted.txt", filepath.Join(base, "hop")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(base, "dirlink")); err != nil {
		t.Fatal(err)
	}
	var s session
	for _, p := range []string{"abs", "rel", "chain", "hop", "dirlink/planted.txt", "dirlink/sub/new.txt"} {
		_, _, err := f.Write(s.state, WriteIn{Path: p, Content: "pwned"})
		wantRefused(t, err, "write_file refused: ")
		wantRefused(t, err, "outside the base directory")
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the write followed a dangling symlink out: %v", err)
	}
	// A dangling link that stays inside is followed.
	if err := os.Symlink("inner/created.txt", filepath.Join(base, "ok")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(base, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	if text, _, err := f.Write(s.state, WriteIn{Path: "ok", Content: "fine"}); err != nil || text != "Created inner/created.txt (4 bytes)." {
		t.Fatalf("inside link: %q %v", text, err)
	}
	// An absolute link that names a place inside is followed too.
	if err := os.Symlink(filepath.Join(base, "a.txt"), filepath.Join(base, "absin")); err != nil {
		t.Fatal(err)
	}
	if text, _, err := f.Read(ReadIn{Path: "absin"}); err != nil || !strings.HasPrefix(text, "     1\tone") {
		t.Fatalf("absolute inside link: %q %v", text, err)
	}
}

// TestLinkMadeByTool: the agent makes the link itself with the shell
// (as it could with git apply of a patch that adds one); the file tools
// still refuse to leave the base directory.
func TestLinkMadeByTool(t *testing.T) {
	f, base, outside := newFiles(t)
	sh := newShell(t, Config{WorkDir: base})
	planted := filepath.Join(filepath.Dir(outside), "planted.txt")
	out, err := sh.Run(t.Context(), "", ShellIn{Command: "ln -s " + outside + " leak && ln -s " + planted + " dangling && ln -s .. up"})
	if err != nil || !strings.HasPrefix(out, "Exit code: 0") {
		t.Fatalf("ln: %q %v", out, err)
	}
	var s session
	_, _, err = f.Read(ReadIn{Path: "leak"})
	wantRefused(t, err, "outside the base directory")
	for _, p := range []string{"leak", "dangling", "up/planted.txt", "up/outside.txt"} {
		_, _, err = f.Write(s.state, WriteIn{Path: p, Content: "pwned"})
		wantRefused(t, err, "outside the base directory")
		_, _, err = f.Edit(s.state, EditIn{Path: p, OldString: "secret", NewString: "pwned"})
		wantRefused(t, err, "outside the base directory")
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret\n" {
		t.Fatal("the file outside changed")
	}
	if _, err := os.Stat(planted); !os.IsNotExist(err) {
		t.Fatal("a file was created outside")
	}
	if out, err := f.List(t.Context(), ListIn{}); err != nil || out != "a.txt" {
		t.Fatalf("list: %q %v", out, err)
	}
	if out, err := f.Search(t.Context(), SearchIn{Pattern: "secret"}); err != nil || out != `No matches for "secret".` {
		t.Fatalf("search: %q %v", out, err)
	}
}

func TestGitDirRefused(t *testing.T) {
	f, base, _ := newFiles(t)
	mustWrite(t, filepath.Join(base, ".git", "config"), "[core]\n")
	var s session
	for _, p := range []string{".git/config", ".git/hooks/pre-commit", "sub/.GIT/config"} {
		_, _, err := f.Write(s.state, WriteIn{Path: p, Content: "[core]\nfsmonitor = id\n"})
		wantRefused(t, err, "is inside a .git directory")
	}
	_, patch, err := f.Read(ReadIn{Path: ".git/config"})
	if err != nil {
		t.Fatal(err)
	}
	s.apply(t, patch)
	_, _, err = f.Edit(s.state, EditIn{Path: ".git/config", OldString: "[core]", NewString: "[core]\nfsmonitor = id"})
	wantRefused(t, err, "is inside a .git directory")
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"**", "a/b/c", true},
		{"**/*.go", "main.go", true},
		{"**/*.go", "a/b/main.go", true},
		{"*.go", "a/main.go", false},
		{"a/**/b", "a/b", true},
		{"a/**/b", "a/x/y/b", true},
		{"a/**/b", "a/x/y/c", false},
		{"**/**/x", "x", true},
		{"a/**", "a", true},
		{"a/**", "b", false},
		{"src/*/x.go", "src/deep/x.go", true},
		{"[", "x", false},
	} {
		if got := matchGlob(tc.pattern, tc.path); got != tc.want {
			t.Errorf("match(%q, %q) = %v", tc.pattern, tc.path, got)
		}
	}
	if _, err := compileGlob("a/[/b"); err == nil {
		t.Error("a bad glob compiled")
	}
}

// TestGlobLinear: repeated **/ segments cost a table, not a search.
func TestGlobLinear(t *testing.T) {
	pattern := strings.Repeat("**/", 30) + "x"
	path := strings.Repeat("a/", 60) + "y"
	g, err := compileGlob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.segs) != 2 {
		t.Fatalf("** not collapsed: %d segments", len(g.segs))
	}
	// Uncollapsed, alternating with a segment that matches anything: a
	// search would try about 2^30 splits, the table 61x61 cells (under 1 ms
	// alone, about 60 ms under -race at load 17), so one match against a
	// bound of seconds tells them apart on a busy machine too.
	hard := glob{segs: strings.Split(strings.Repeat("**/*/", 30)+"x", "/")}
	start := time.Now()
	if g.match(path) || hard.match(path) {
		t.Fatal("matched")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("one worst-case match took %v", d)
	}
}

func BenchmarkGlobWorstCase(b *testing.B) {
	for _, n := range []int{10, 20, 40} {
		hard := glob{segs: strings.Split(strings.Repeat("**/*/", n)+"x", "/")}
		path := strings.Repeat("a/", 2*n) + "y"
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				hard.match(path)
			}
		})
	}
}

func TestWalkStopsAtDeadline(t *testing.T) {
	f, base, _ := newFiles(t)
	for i := range 50 {
		mustWrite(t, filepath.Join(base, "d", fmt.Sprint(i), "f.txt"), "x\n")
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := f.List(ctx, ListIn{Pattern: strings.Repeat("**/", 30) + "x"})
	wantRefused(t, err, "list_files stopped: the call's time ran out")
	_, err = f.Search(ctx, SearchIn{Pattern: "x"})
	wantRefused(t, err, "search_files stopped: the call's time ran out")
	// Stopping mid-walk: the context ends after a few entries.
	n := 0
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	err = f.walk(cctx, ".", ".", func(string, string, os.FileInfo) bool {
		if n++; n == 3 {
			ccancel()
		}
		return true
	})
	if err != errDeadline || n != 3 {
		t.Fatalf("walk went on after the context ended: %d files, %v", n, err)
	}
}

// TestRootCatchesLateLink: a link that appears after the resolution (a
// race the resolver cannot see) is refused by os.Root at use.
func TestRootCatchesLateLink(t *testing.T) {
	f, base, outside := newFiles(t)
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(base, "late")); err != nil {
		t.Fatal(err)
	}
	// As if resolve had run before the link existed: the path is used as is.
	_, err := f.put(filepath.Join("late", "planted.txt"), []byte("pwned"), 0o644)
	if err == nil || !isEscape(err) {
		t.Fatalf("put through a late link: %v", err)
	}
	wantRefused(t, f.fail("write_file failed", "late/planted.txt", err), "resolves (through a symlink) outside the base directory")
	if _, err := os.Stat(filepath.Join(filepath.Dir(outside), "planted.txt")); !os.IsNotExist(err) {
		t.Fatal("written outside")
	}
}

// matchGlob matches a /-separated path against a glob whose ** segments
// match any number of path segments; an invalid pattern matches nothing.
func matchGlob(pattern, p string) bool {
	g, err := compileGlob(pattern)
	return err == nil && g.match(p)
}
