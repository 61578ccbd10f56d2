package skills_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/toolbus/toolbus/skills"
)

// TestAttack42FolderSwappedAfterCheck (session 42, red team): a hostile
// skill author who may write a skill folder a router loads (or an operator
// pushes) swaps a file between the loader's check and its read: a link to a
// file outside the skill (the router's secrets, /dev/zero) or a FIFO, which
// a blocking open waits on for good (the router's Start with it). The
// loader judged a path and read it again by name, so the swap won; now
// every file is opened once beneath the folder (os.Root: no link out of
// it), non-blocking, and what it read is what it judged (the descriptor's
// own type, at most MaxFile bytes).
func TestAttack42FolderSwappedAfterCheck(t *testing.T) {
	base := t.TempDir()
	dir, stage := filepath.Join(base, "s42"), filepath.Join(base, "stage")
	for _, d := range []string{dir, stage} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, skills.File), "---\nname: s42\ndescription: d\n---\nbody\n")
	write(filepath.Join(base, "secret"), "SECRET")
	write(filepath.Join(dir, "ref.txt"), "inside")
	fifo := filepath.Join(stage, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}

	// The swapper puts, in turn, a regular file, a link out and the FIFO
	// at ref.txt (renames: the path always exists), and opens the FIFO for
	// writing without blocking, which frees a reader blocked on it (so the
	// test cannot hang before the fix: the read then finds "").
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		target := filepath.Join(dir, "ref.txt")
		next := filepath.Join(stage, "next")
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			_ = os.Remove(next)
			var err error
			switch i % 3 {
			case 0:
				err = os.WriteFile(next, []byte("inside"), 0o600)
			case 1:
				err = os.Symlink(filepath.Join(base, "secret"), next)
			case 2:
				err = os.Link(fifo, next)
			}
			if err == nil {
				err = os.Rename(next, target)
			}
			if err != nil {
				t.Error(err)
				return
			}
			if fd, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				_ = syscall.Close(fd)
			}
		}
	})
	defer wg.Wait()
	defer close(done)

	read := 0
	for range 20000 {
		files, _, err := skills.ReadFolder(dir)
		if err != nil {
			continue // a file moved mid-walk: an error is fine, a wrong read is not
		}
		b, ok := files["ref.txt"]
		if !ok {
			continue
		}
		if string(b) != "inside" {
			t.Fatalf("the loader read %q at ref.txt (a link out of the skill, or a FIFO, swapped in after its check)", b)
		}
		read++
	}
	t.Logf("ref.txt read as the regular file in %d of 20000 loads", read)
}

// TestAttack42FolderOfEmptyDirectories (session 42, red team): a skill
// folder's directories were not counted, only its files: 200,000 empty
// directories (or links out, FIFOs: refused entries) made every load walk
// them, 21 s at each router start here, without a bound. Every entry now
// counts as an archive's does: past twice MaxFiles the folder is refused.
func TestAttack42FolderOfEmptyDirectories(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s42")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, skills.File), []byte("---\nname: s42\ndescription: d\n---\nbody\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 2 * skills.MaxFiles {
		if err := os.Mkdir(filepath.Join(dir, "d"+strconv.Itoa(i)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := skills.LoadFolder(dir); err == nil || !strings.Contains(err.Error(), "entries") {
		t.Fatalf("a folder of %d empty directories and a SKILL.md: %v", 2*skills.MaxFiles, err)
	}
}
