package shellcmd

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// sedWords are the option and operand words TestAttackSedWrites combines:
// -i's forms (attached, abbreviated, --in-place=, a '*' backup), options
// that take a value (-e, -l, -f and their long forms), flags that GNU sed
// clusters with them (-n, -E, -s, -z), scripts that write (w, W, s///w)
// or run (e, s///e), and a trailing -e with no value.
var sedWords = []string{
	"-i", "-i.bak", "-ie", "-ni", "-in", "-i" + "bk/*", "-Ei", "-si",
	"--in-place", "--in-place=.b", "--in=.c", "--i", "--in-place=bk/*",
	"-n", "-E", "-s", "-z", "-u", "--posix", "--debug", "--separate", "--follow-symlinks",
	"-e", "-es/a/b/", "-ew pwned", "--expression=w pwned", "--e=s/a/b/", "--expression",
	"-f", "-nf", "script", "--file=script", "--fi", "-l", "-l5", "5", "--line-length", "--l=3",
	"s/a/b/", "p", "w pwned", "s/a/b/w pwned", "1W pwned", "e touch pwned", "s/a/touch pwned/e",
	"--", "-", "f", "g",
}

// TestAttackSedWrites runs GNU sed on combinations of sedWords in a scratch
// directory: whenever checkSed accepts the arguments, every file sed then
// created or changed must be among the writes checkSed named (sed's
// option parsing moved to the shared getopt).
func TestAttackSedWrites(t *testing.T) {
	if out, err := exec.Command("sed", "--version").Output(); err != nil || !bytes.Contains(out, []byte("GNU sed")) {
		t.Skip("no GNU sed")
	}
	var cases [][]string
	for _, w := range sedWords {
		cases = append(cases, []string{w, "f"}, []string{"-e", "p", w, "f"}, []string{w})
	}
	r := rand.New(rand.NewPCG(12, 26))
	for range 1500 {
		n := 1 + r.IntN(4)
		c := make([]string, n)
		for i := range c {
			c[i] = sedWords[r.IntN(len(sedWords))]
		}
		cases = append(cases, c)
	}
	for _, args := range cases {
		ws, err := checkSed(args)
		if err != nil {
			continue
		}
		dir := t.TempDir()
		for name, body := range map[string]string{"f": "a\n", "g": "a\n", "script": "w pwned\n", "bk/keep": ""} {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		before := snapshot(t, dir)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		cmd := exec.CommandContext(ctx, "sed", args...)
		cmd.Dir, cmd.Stdin, cmd.Env = dir, strings.NewReader("a\n"), []string{"PATH=" + os.Getenv("PATH")}
		_ = cmd.Run()
		cancel()
		for name, body := range snapshot(t, dir) {
			if old, ok := before[name]; ok && old == body {
				continue
			}
			if !slices.ContainsFunc(ws, func(w Write) bool { return filepath.Clean(w.Path) == name }) {
				t.Errorf("sed %q wrote %s; checkSed accepted it naming only %+v", args, name, ws)
			}
		}
	}
}

// snapshot maps every file under dir (relative name) to its content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(dir, p)
		m[r] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestAttackSedTrailingE: a trailing -e, -l or --expression with no value
// is no longer refused by the check; sed itself must then refuse to run,
// so a script left as an operand (which the check took for a file) never
// runs.
func TestAttackSedTrailingE(t *testing.T) {
	if out, err := exec.Command("sed", "--version").Output(); err != nil || !bytes.Contains(out, []byte("GNU sed")) {
		t.Skip("no GNU sed")
	}
	for _, args := range [][]string{
		{"w pwned", "f", "-e"}, {"-n", "w pwned", "-l"}, {"w pwned", "--expression"}, {"w pwned", "--e"},
		{"-i", "w pwned", "f", "-e"}, {"s/a/b/w pwned", "-e"},
	} {
		ws, err := checkSed(args)
		if err != nil {
			continue
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("a\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sed", args...)
		cmd.Dir, cmd.Stdin = dir, strings.NewReader("a\n")
		if err := cmd.Run(); err == nil {
			t.Errorf("sed %q ran (checkSed: %+v)", args, ws)
		}
		if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
			t.Errorf("sed %q wrote pwned", args)
		}
	}
}

// TestAttackParseHalf: Parse now returns the trees that parse with the
// first error. A command only bash parses (or only sh) must come with an
// error, so the allow-list check (which refuses on any error) never judges
// half of it, while Writes still reports the writes of the half it reads.
func TestAttackParseHalf(t *testing.T) {
	for _, cmd := range []string{"cat x > .bashrc; ls <(id)", "cat x > .bashrc; [[ -n $(id) ]]", "cat x > .bashrc; f() ( id ); ls {a,b}; a=(1 2)", "cat x > .bashrc; ls >& y"} {
		files, err := Parse(cmd)
		if len(files) == 2 && err == nil {
			continue // both grammars read it: both are checked
		}
		if err == nil {
			t.Errorf("Parse(%q): %d trees and no error", cmd, len(files))
		}
		ws, _ := Writes(cmd)
		if len(files) > 0 && !slices.ContainsFunc(ws, func(w Write) bool { return w.Path == ".bashrc" }) {
			t.Errorf("Writes(%q) = %+v, missing .bashrc", cmd, ws)
		}
	}
}
