package shellcmd

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestWrites(t *testing.T) {
	for cmd, want := range map[string][]string{
		"cat x > a 2>&1 >/dev/null":         {"a"},
		"echo x >> b; ls >| c; cat <> d":    {"b", "c", "d"},
		"cp -t dir x y; tee e f":            {"dir", "x", "y", "e", "f"},
		"sed -i.bak s/a/b/ f g":             {"f", "g"},
		"sed s/a/b/ f":                      nil,
		"tar czf out.tgz -C src .":          {"out.tgz", "src"},
		"sort -o s x; uniq in out; dd of=o": {"s", "out", "o"},
		"git diff --output=d.diff":          {"d.diff"},
		"git checkout -- f":                 {"f"},
		"cat > $X":                          {""},
		"cd sub; cat x > a":                 {"", ""},
		"python x.py > /tmp/y":              {"/tmp/y"},
	} {
		ws, err := Writes(cmd)
		if err != nil {
			t.Fatalf("%q: %v", cmd, err)
		}
		if len(want) == 0 && len(ws) == 0 {
			continue
		}
		for _, w := range want {
			if !slices.ContainsFunc(ws, func(x Write) bool { return x.Path == w }) {
				t.Errorf("%q: writes %+v, want %q among them", cmd, ws, w)
			}
		}
		if want == nil && len(ws) > 0 {
			t.Errorf("%q: writes %+v, want none", cmd, ws)
		}
	}
}

func TestProtected(t *testing.T) {
	for p, want := range map[string]bool{
		".git/config": true, "a/.GIT/hooks/x": true, ".gitconfig": true, "sub/.bashrc": true, ".env.local": true,
		".gitignore": false, "git/config": false, "a.git": false, ".github/x": false, ".gitattributes": false,
	} {
		if _, got := Protected(p); got != want {
			t.Errorf("Protected(%q) = %v", p, got)
		}
	}
	for a, want := range map[string]bool{"-t.git/": true, "--target-directory=.git": true, "--exclude=x": false, "-p": false} {
		if _, got := ProtectedArg(a); got != want {
			t.Errorf("ProtectedArg(%q) = %v", a, got)
		}
	}
}

// FuzzProfiles: no profile panics on any arguments, and a sed script with
// an e, w or W command anywhere a command may start is refused.
func FuzzProfiles(f *testing.F) {
	for _, s := range []string{"-i s/a/b/ f", "-n '/x/w out' f", "czf a.tgz .", "-cIid -f a .", "--use-comp=x", "-e p -e '$!e id'",
		"s/x/y/e", "y/abc/xyz/", "1~2{p;d}", "0,/re/I{s|a|b|gw f\n}", ",", "\\", "s", "-o", "--output", "-t.git"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Fields(s)
		for _, name := range Profiles() {
			p, _ := Lookup(name)
			_, _ = p.Check(args)
		}
		_ = sedScript(s)
		for _, c := range []string{"e", "w x", "W x", "s/a/b/e", "s/a/b/w x"} {
			if err := sedScript("p;" + c); err == nil {
				t.Fatalf("sed script %q accepted", "p;"+c)
			}
		}
	})
}

// Profiles returns the names of the programs that have a profile, sorted.
func Profiles() []string {
	return slices.Sorted(maps.Keys(profiles))
}
