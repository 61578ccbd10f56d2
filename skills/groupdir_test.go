//go:build unix

package skills

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// as runs argv as uid:gid (no other groups) and returns its error and output.
func as(uid, gid uint32, argv ...string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// sharedTmp returns a fresh sticky, world-writable directory like /tmp whose
// ancestors others may enter, made the temp directory for the test.
func sharedTmp(t *testing.T) string {
	tmp := t.TempDir()
	for d, mode := range map[string]os.FileMode{filepath.Dir(tmp): 0o755, tmp: 0o777 | os.ModeSticky} {
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TMPDIR", tmp)
	return tmp
}

// TestGroupDirForShellUser: for a shell user of its own (nobody here), a
// root router's skills are materialised in the temp directory, where that
// user can read and run them but not change, move or remove them, and
// where another local user cannot read them (docs/security.md, session 31).
func TestGroupDirForShellUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running commands as other users needs root")
	}
	tmp := sharedTmp(t)
	src := filepath.Join(t.TempDir(), "tool")
	writeFile(t, filepath.Join(src, "SKILL.md"), "---\nname: tool\ndescription: d\n---\nRun scripts/run.sh.\n")
	writeFile(t, filepath.Join(src, "scripts", "run.sh"), "cat \"$(dirname \"$0\")/../secret.txt\"\n")
	writeFile(t, filepath.Join(src, "secret.txt"), "the author's secret\n")
	cat := NewCatalogue(Config{Dirs: []string{src}})
	if err := cat.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	dir, err := PrivateDir(filepath.Join(t.TempDir(), "data", "skills"), "router-x-", 65534)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(dir)
	if err != nil || filepath.Dir(dir) != tmp || !strings.HasPrefix(filepath.Base(dir), "toolbus-skills-router-x-") ||
		!fi.IsDir() || fi.Mode().Perm() != 0o750 || fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Sys().(*syscall.Stat_t).Gid != 65534 {
		t.Fatalf("%s: %v %v", dir, fi, err)
	}
	m, err := NewMaterializer(cat, dir)
	if err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o077) // a hardened root's: the files are still readable by the group
	sdir, release, err := m.Acquire(t.Context(), "tool", "")
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if out, err := as(65534, 65534, "/bin/sh", filepath.Join(sdir, "scripts", "run.sh")); err != nil || out != "the author's secret\n" {
		t.Fatalf("nobody runs the script: %q %v", out, err)
	}
	secret := filepath.Join(sdir, "secret.txt")
	for _, argv := range [][]string{
		{"/bin/sh", "-c", "echo swapped > " + secret},
		{"/bin/sh", "-c", "echo swapped > " + filepath.Join(sdir, "scripts", "new.sh")},
		{"/bin/mv", sdir, sdir + "-old"},
		{"/bin/rm", "-rf", sdir},
		{"/bin/mkdir", filepath.Join(dir, "sha256-planted")},
	} {
		if out, err := as(65534, 65534, argv...); err == nil {
			t.Errorf("the shell user changed the skill: %v: %s", argv, out)
		}
	}
	for _, argv := range [][]string{{"/bin/cat", secret}, {"/bin/ls", dir}} {
		if out, err := as(4242, 4242, argv...); err == nil {
			t.Errorf("another local user read the skill: %v: %s", argv, out)
		}
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "the author's secret\n" {
		t.Fatalf("the skill's file: %q %v", b, err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("Close left %s: %v", dir, err)
	}
}

// TestGroupDirRefusesPlantedTmp: a local user cannot choose the directory a
// root router's skills go to for its shell user: not by a directory or link
// of the expected name in /tmp (the name is random and never reused), not by
// a link as the temp directory (the real path is used), and a temp
// directory another user owns or may replace is refused.
func TestGroupDirRefusesPlantedTmp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	tmp := sharedTmp(t)
	elsewhere := t.TempDir()
	for _, p := range []string{"toolbus-skills-r-", "toolbus-skills-r-1"} {
		if err := os.Symlink(elsewhere, filepath.Join(tmp, p)); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(filepath.Join(tmp, p), 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := PrivateDir("", "r-", 65534)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || filepath.Dir(dir) != tmp || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("%s: %v %v", dir, fi, err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("followed a planted link: %v", entries)
	}

	// The temp directory is a link another user may turn elsewhere later.
	link := filepath.Join(tmp, "mytmp")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", link)
	if dir, err := PrivateDir("", "r-", 65534); err != nil || filepath.Dir(dir) != elsewhere {
		t.Fatalf("under a link: %s %v", dir, err)
	}

	theirs := filepath.Join(tmp, "theirs")
	open := filepath.Join(elsewhere, "open")
	for d, mode := range map[string]os.FileMode{theirs: 0o755, open: 0o777} {
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]string{theirs: "belongs to uid 65534", open: "others could replace it"} {
		t.Setenv("TMPDIR", d)
		if dir, err := PrivateDir("", "r-", 65534); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("TMPDIR %s: %s %v, want %q", d, dir, err, want)
		}
		if entries, _ := os.ReadDir(d); len(entries) != 0 {
			t.Errorf("left %v in %s", entries, d)
		}
	}
}
