package skills

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrivateDir(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "data", "skills")
	a, err := PrivateDir(parent, "router-x-", -1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := PrivateDir(parent, "router-x-", -1)
	if err != nil {
		t.Fatal(err)
	}
	if a == b || !strings.HasPrefix(filepath.Base(a), "router-x-") {
		t.Fatalf("not fresh: %s %s", a, b)
	}
	for _, d := range []string{parent, a} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: mode %v %v, want 0700", d, fi.Mode().Perm(), err)
		}
	}
	m, err := NewMaterializer(NewCatalogue(Config{}), a)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Fatalf("Close left %s: %v", a, err)
	}

	// Refused for reuse: open to others, a symlink, another user's.
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMaterializer(NewCatalogue(Config{}), open); err == nil || !strings.Contains(err.Error(), "has mode 0777") {
		t.Fatalf("a world-writable directory: %v", err)
	}
	if _, err := PrivateDir(open, "r-", -1); err == nil {
		t.Fatal("PrivateDir under a world-writable parent")
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(b, link); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMaterializer(NewCatalogue(Config{}), link); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("a symlink: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	theirs := filepath.Join(t.TempDir(), "toolbus-skills-router1") // created first by another local user
	if err := os.Mkdir(theirs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMaterializer(NewCatalogue(Config{}), theirs); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("another user's directory: %v", err)
	}
	if _, err := PrivateDir(theirs, "r-", -1); err == nil {
		t.Fatal("PrivateDir under another user's parent")
	}
	// With a group (for --shell-user): TestGroupDirForShellUser.
}
