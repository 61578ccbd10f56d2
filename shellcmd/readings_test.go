package shellcmd

import (
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"mvdan.cc/sh/v3/syntax"
)

// readingSeeds hold every construct of bashOnly and bashWords and plain
// commands around them.
var readingSeeds = []string{
	"ls; ls", "cat x > a 2>&1 >/dev/null", "echo 'a;b' | cat", "sh -c 'rm x'", "f() { rm x; }; f",
	"if true; then rm x; fi", "cat <<EOF > o\n$(rm x)\nEOF", "echo \"$x\" `y` $((1+2))",
	"a|&b", "echo $'x'", `echo $"x"`, "echo $[1]", "echo ${x:1}", "((x))", "case x in a) ls;& esac",
	"cat <(ls)", "tee >(ls)", "ls &> o", "cat <<< x", "a+=1 ls", "a=(1 2)", "echo @(a)", "echo !(a)",
	"x[1]=2 ls", "[[ -f x ]]", "{a[1]}>f ls", "ti\\\nme ls", "let x=1", "function f { ls; }",
	"declare x", "local x", "export X=1 rm x", "readonly x", "typeset x", "nameref x", "time rm x",
	"coproc rm x", "select x in a; do ls; done", "timeout 5 rm x", "delete x", "x_time ls",
}

// TestParseReadings: for a command that sameReading passes, the POSIX
// and bash grammars give equal trees or both fail, so ParseReadings'
// one tree stands for both; for the seeds that hold a bash-only
// construct it parses both.
func TestParseReadings(t *testing.T) {
	for _, cmd := range readingSeeds {
		checkReadings(t, cmd)
	}
	for _, cmd := range []string{"a|&b", "echo $'x'", "time rm x", "export X=1 rm x", "ti\\\nme ls", "[[ -f x ]]"} {
		if sameReading(cmd) {
			t.Errorf("%q: sameReading", cmd)
		}
	}
	for _, cmd := range []string{"ls; ls", "timeout 5 rm x", "delete x", "x_time ls", strings.Repeat("ls; ", 100)} {
		if !sameReading(cmd) {
			t.Errorf("%q: not sameReading", cmd)
		}
		if files, err := ParseReadings(cmd); err != nil || len(files) != 1 {
			t.Errorf("%q: %d trees, %v", cmd, len(files), err)
		}
	}
}

// FuzzParseReadings is TestParseReadings' property on any command.
func FuzzParseReadings(f *testing.F) {
	for _, s := range readingSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cmd string) { checkReadings(t, cmd) })
}

func checkReadings(t *testing.T, cmd string) {
	t.Helper()
	files, err := ParseReadings(cmd)
	want, werr := Parse(cmd)
	if (err == nil) != (len(want) > 0) {
		t.Fatalf("%q: ParseReadings error %v, Parse gave %d trees (%v)", cmd, err, len(want), werr)
	}
	if !sameReading(cmd) {
		if !reflect.DeepEqual(files, want) {
			t.Fatalf("%q: ParseReadings is not Parse: %d trees, want %d", cmd, len(files), len(want))
		}
		return
	}
	posix, perr := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(cmd), "")
	bash, berr := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(cmd), "")
	switch {
	case berr != nil && perr == nil:
		t.Fatalf("%q: bash fails (%v) where POSIX parses", cmd, berr)
	case berr != nil:
		if len(files) != 0 {
			t.Fatalf("%q: ParseReadings gave %d trees where no grammar parses", cmd, len(files))
		}
		return
	case perr == nil && !reflect.DeepEqual(posix, bash):
		t.Fatalf("%q: the grammars read it differently", cmd)
	}
	// Parse gives [posix, bash] (equal) or, when only POSIX refuses it, [bash].
	if len(files) != 1 || !reflect.DeepEqual(files[0], bash) {
		t.Fatalf("%q: ParseReadings gave %d trees", cmd, len(files))
	}
}

// TestAttackDeepNesting (session 19): mvdan.cc/sh's parser recurses per
// level of nesting, so 64 KiB of "(" took it 5 s and 256 MB of stack and
// 256 KiB of it killed the process (fatal stack overflow: no recover),
// the router's with it, through a permission decision or the built-in
// shell's allow-list check. Parse now refuses a nesting past maxFrames
// with ErrTooDeep, having grown the stack by a few MB at most, within
// milliseconds; ordinary nesting still parses.
func TestAttackDeepNesting(t *testing.T) {
	for _, unit := range []string{"(", "$(", "{ ", "if ", "\"$(", "$((-", "${a:-", "x=$("} {
		for _, n := range []int{1 << 10, 256 << 10, 1 << 20} {
			cmd := strings.Repeat(unit, n/len(unit))
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			start := time.Now()
			for _, parse := range []func(string) ([]*syntax.File, error){Parse, ParseReadings} {
				if _, err := parse(cmd); n > 1<<10 && !errors.Is(err, ErrTooDeep) {
					t.Errorf("%q×%d: %v, want ErrTooDeep", unit, n/len(unit), err)
				}
			}
			runtime.ReadMemStats(&m1)
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("%q×%d: %v", unit, n/len(unit), el) // a few ms on a quiet machine
			}
			if grown := int64(m1.StackSys) - int64(m0.StackSys); grown > 16<<20 {
				t.Errorf("%q×%d: the stack grew by %d MiB", unit, n/len(unit), grown>>20)
			}
		}
	}
	nested := strings.Repeat("echo $(", 200) + "ls" + strings.Repeat(")", 200) + " > out"
	if ws, err := Writes(nested); err != nil || len(ws) == 0 || ws[0].Path != "out" {
		t.Fatalf("200 substitutions deep: %+v %v", ws, err)
	}
}

// Writes is WritesOf over Parse's trees of cmd (err: neither grammar
// parses), as permission reads a command's writes: the tests' entry.
func Writes(cmd string) ([]Write, error) {
	files, err := Parse(cmd)
	if len(files) == 0 {
		return nil, err
	}
	return WritesOf(cmd, files, nil), nil
}
