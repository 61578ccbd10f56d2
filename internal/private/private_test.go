//go:build unix

package private_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/private"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode
		deny os.FileMode
		link bool
		want string // "" accepted
	}{
		{"private", 0o700, 0o077, false, ""},
		{"group_reads_for_skills", 0o750, 0o027, false, ""},
		{"group_reads_for_store", 0o750, 0o077, false, "has mode 0750: other users may reach it"},
		{"open", 0o777, 0o027, false, "has mode 0777"},
		{"link", 0o700, 0o077, true, "not a directory (a symlink?)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			if tc.link {
				link := dir + "-link"
				if err := os.Symlink(dir, link); err != nil {
					t.Fatal(err)
				}
				dir = link
			}
			err := private.Check(dir, tc.deny, "the test")
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "refusing it for the test")) {
				t.Fatalf("Check: %v, want %q", err, tc.want)
			}
		})
	}
	fresh := filepath.Join(t.TempDir(), "fresh")
	if err := private.Mkdir(fresh, 0o077, "the test"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("Mkdir made %v %v", fi.Mode(), err)
	}
}
