//go:build linux

package builtin

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// swapAttempts bounds the racing loops below: attempts, not time. Before
// the file tools opened with openat2(RESOLVE_NO_SYMLINKS) a few hundred
// were enough to win the race on the shared 2-core machine.
const swapAttempts = 3000

// flipper swaps the names a and b (a real directory and a symlink) with
// renameat2(RENAME_EXCHANGE) until stop is called, so that a names a
// directory, then the link, then the directory again, atomically each
// time. It skips the test where the file system cannot exchange.
func flipper(t *testing.T, a, b string) (stop func()) {
	t.Helper()
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		t.Skipf("renameat2(RENAME_EXCHANGE): %v", err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("exchange: %v", err)
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// readKey is the path a read record names: the resolved path the file
// tool judged (its .git check, and the rules' resolution of the same
// tree).
func readKey(t *testing.T, patch any) string {
	t.Helper()
	m, _ := patch.(map[string]any)
	reads, _ := m["file_reads"].(map[string]any)
	for k := range reads {
		return k
	}
	t.Fatalf("no read record in %v", patch)
	return ""
}

// TestAttackSwapDirRead: d is a real directory holding a public k while a
// goroutine (as a shell command running beside the agent would) swaps it
// for a symlink to secret/, a directory a deny rule names. Every read of
// d/k that the tool judged as d/k (its read record) must have read the
// public file; before openat2, os.Root followed the link swapped in after
// the resolution and read the denied one.
func TestAttackSwapDirRead(t *testing.T) {
	f, base, _ := newFiles(t)
	mustWrite(t, filepath.Join(base, "secret", "k"), "denied\n")
	mustWrite(t, filepath.Join(base, "d", "k"), "public\n")
	must(t, os.Symlink("secret", filepath.Join(base, "swap")))
	stop := flipper(t, filepath.Join(base, "d"), filepath.Join(base, "swap"))
	leaks, reads := 0, 0
	for range swapAttempts {
		text, patch, err := f.Read(ReadIn{Path: "d/k"})
		if err != nil {
			continue
		}
		reads++
		if key := readKey(t, patch); key == filepath.Join(base, "d", "k") && strings.Contains(text, "denied") {
			leaks++
		}
	}
	stop()
	if leaks > 0 {
		t.Fatalf("%d of %d reads judged as d/k read secret/k", leaks, reads)
	}
	t.Logf("%d of %d attempts read a file; none read another than the one judged", reads, swapAttempts)
}

// TestAttackSwapDirWrite: the same swap, with the link pointing into
// .git: a write_file of d/config (a new file there, so no read needed)
// must never reach .git/config, which the .git check refuses when it
// sees it.
func TestAttackSwapDirWrite(t *testing.T) {
	f, base, _ := newFiles(t)
	mustWrite(t, filepath.Join(base, ".git", "config"), "[core]\n")
	must(t, os.Mkdir(filepath.Join(base, "d"), 0o755))
	must(t, os.Symlink(".git", filepath.Join(base, "swap")))
	real, err := unix.Open(filepath.Join(base, "d"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(real)
	stop := flipper(t, filepath.Join(base, "d"), filepath.Join(base, "swap"))
	var s session
	for range swapAttempts {
		_, _, _ = f.Write(s.state, WriteIn{Path: "d/config", Content: "[core]\n\tfsmonitor = touch pwned\n"})
		// Remove what a write created in the real directory (whatever
		// its name now), so the next attempt is a creation again.
		_ = unix.Unlinkat(real, "config", 0)
	}
	stop()
	if b, err := os.ReadFile(filepath.Join(base, ".git", "config")); err != nil || string(b) != "[core]\n" {
		t.Fatalf(".git/config is now %q (%v)", b, err)
	}
}

// TestAttackSwapDirWalk: list_files and search_files of pub/ while pub/x
// is swapped between a real directory and a symlink to secret/: the walk
// must not enter the link (it was judged as a directory when listed), so
// no line of secret/k shows, under either name.
func TestAttackSwapDirWalk(t *testing.T) {
	f, base, _ := newFiles(t)
	mustWrite(t, filepath.Join(base, "secret", "k"), "denied\n")
	mustWrite(t, filepath.Join(base, "pub", "x", "k"), "public\n")
	must(t, os.Symlink("../secret", filepath.Join(base, "pub", "swap")))
	stop := flipper(t, filepath.Join(base, "pub", "x"), filepath.Join(base, "pub", "swap"))
	leaks := 0
	for range swapAttempts / 3 {
		out, err := f.Search(t.Context(), SearchIn{Pattern: "denied", Path: "pub"})
		if err == nil && strings.Contains(out, ":1:denied") {
			leaks++
		}
	}
	stop()
	if leaks > 0 {
		t.Fatalf("%d searches of pub/ read secret/k through a swapped directory", leaks)
	}
}

// TestAttackWalkLinkOutOfRoot: a symlink inside the searched directory
// that points elsewhere in the base (to a file a path rule denies) is
// not followed: the rules judged the directory searched, not the link's
// target.
func TestAttackWalkLinkOutOfRoot(t *testing.T) {
	f, base, _ := newFiles(t)
	mustWrite(t, filepath.Join(base, "secret", "k"), "denied\n")
	mustWrite(t, filepath.Join(base, "pub", "p"), "public\n")
	must(t, os.Symlink("../secret/k", filepath.Join(base, "pub", "leak")))
	must(t, os.Symlink("p", filepath.Join(base, "pub", "in")))
	out, err := f.Search(t.Context(), SearchIn{Pattern: "denied|public", Path: "pub"})
	if err != nil || strings.Contains(out, "denied") || !strings.Contains(out, "pub/in:1:public") {
		t.Fatalf("search of pub/: %q %v", out, err)
	}
	out, err = f.List(t.Context(), ListIn{Path: "pub"})
	if err != nil || out != "pub/in\npub/p" {
		t.Fatalf("list of pub/: %q %v", out, err)
	}
	// From the base, secret/k is inside what was judged: it is found.
	if out, err := f.Search(t.Context(), SearchIn{Pattern: "denied"}); err != nil || !strings.Contains(out, "secret/k:1:denied") {
		t.Fatalf("search of the base: %q %v", out, err)
	}
}

// TestAttackFIFO: a FIFO made by the agent (mkfifo through the shell) is
// refused, not opened for good: opening a FIFO for reading waits for a
// writer, which would hold the tool's goroutine and descriptor after the
// call's timeout, one more each call.
func TestAttackFIFO(t *testing.T) {
	f, base, _ := newFiles(t)
	fifo := filepath.Join(base, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := f.Read(ReadIn{Path: "fifo"})
		// search_files of it, and of the directory, answer too.
		_, _ = f.Search(t.Context(), SearchIn{Pattern: "x", Path: "fifo"})
		_, _ = f.Search(t.Context(), SearchIn{Pattern: "x"})
		done <- err
	}()
	// A bound on a hang, not a synchronisation: the calls answer on their
	// own or, 10 s later, a writer releases them and the test fails.
	select {
	case err := <-done:
		wantRefused(t, err, "not a regular file")
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		<-done
		t.Fatal("read_file of a FIFO waited for a writer")
	}
}

// TestAttackSwapWithoutOpenat2: the same attacks, and the symlink tests
// before them, on the fallback a kernel without openat2 gets (the walk
// one component at a time, each opened O_NOFOLLOW).
func TestAttackSwapWithoutOpenat2(t *testing.T) {
	forceWalk = true
	t.Cleanup(func() { forceWalk = false })
	for name, test := range map[string]func(*testing.T){
		"SwapDirRead": TestAttackSwapDirRead, "SwapDirWrite": TestAttackSwapDirWrite, "SwapDirWalk": TestAttackSwapDirWalk,
		"WalkLinkOutOfRoot": TestAttackWalkLinkOutOfRoot, "FIFO": TestAttackFIFO, "DanglingSymlink": TestDanglingSymlink,
		"RootCatchesLateLink": TestRootCatchesLateLink, "LinkChainIntoGit": TestAttackLinkChainIntoGit,
		"LeaveAndReenter": TestAttackLeaveAndReenter, "LinkLoop": TestAttackLinkLoop, "GitDirRefused": TestGitDirRefused,
		"ListAndSearch": TestListAndSearch, "WalkStopsAtDeadline": TestWalkStopsAtDeadline,
	} {
		t.Run(name, test)
	}
}

// TestAttackEditGrowth: edit_file with replace_all multiplies the file:
// a short old_string that appears often, replaced by a long new_string,
// asks for len(file) + n*(len(new)-len(old)) bytes at once (64 KiB of
// "a" and 512 bytes each: 32 MiB; 16 MiB and 1 MiB: 16 TiB, a fatal out
// of memory that no recover catches, in the router when it serves the
// tools itself). The result must stay within what read_file reads.
func TestAttackEditGrowth(t *testing.T) {
	f, base, _ := newFiles(t)
	mustWrite(t, filepath.Join(base, "big.txt"), strings.Repeat("a", 64<<10))
	var s session
	_, patch, err := f.Read(ReadIn{Path: "big.txt"})
	must(t, err)
	s.apply(t, patch)
	_, _, err = f.Edit(s.state, EditIn{Path: "big.txt", OldString: "a", NewString: strings.Repeat("b", 512), ReplaceAll: true})
	wantRefused(t, err, "more than")
	if fi, err := os.Stat(filepath.Join(base, "big.txt")); err != nil || fi.Size() != 64<<10 {
		t.Fatalf("big.txt changed: %v %v", fi, err)
	}
	// Shrinking and growing within the bound still work.
	if _, _, err := f.Edit(s.state, EditIn{Path: "big.txt", OldString: "a", NewString: "bb", ReplaceAll: true}); err != nil {
		t.Fatal(err)
	}
}

// TestAttackSearchBigFile: search_files given a file (not a directory)
// over 10 MiB read it whole, line by line, with no look at the call's
// deadline; files over 10 MiB are skipped, named or found.
func TestAttackSearchBigFile(t *testing.T) {
	f, base, _ := newFiles(t)
	p := filepath.Join(base, "big.log")
	mustWrite(t, p, "match\n")
	must(t, os.Truncate(p, maxSearchFile+1))
	out, err := f.Search(t.Context(), SearchIn{Pattern: "match", Path: "big.log"})
	if strings.Contains(out, "big.log:1:match") {
		t.Fatalf("search of a file over %d bytes: %q %v", maxSearchFile, out, err)
	}
	wantRefused(t, err, "more than")
}

// TestAttackRedirectWithoutOpenat2: the allow-listed interpreter opens a
// command's write redirections without following symlinks. Where openat2
// is missing it fell back to open(O_NOFOLLOW), which guards only the
// last component: "> g/x" with g a link wrote through it. The fallback now
// walks every component O_NOFOLLOW.
func TestAttackRedirectWithoutOpenat2(t *testing.T) {
	base := t.TempDir()
	must(t, os.Mkdir(filepath.Join(base, "sub"), 0o755))
	must(t, os.Symlink("sub", filepath.Join(base, "g")))
	for _, walk := range []bool{false, true} {
		forceWalk = walk
		open := openNoFollow(base)
		if w, err := open(t.Context(), filepath.Join(base, "g", "x"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644); err == nil {
			w.Close()
			t.Errorf("walk %v: a redirection wrote through the symlink g", walk)
		}
		if w, err := open(t.Context(), filepath.Join(base, "sub", "y"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
			t.Errorf("walk %v: a plain redirection: %v", walk, err)
		} else {
			w.Close()
		}
	}
	forceWalk = false
	if _, err := os.Stat(filepath.Join(base, "sub", "x")); err == nil {
		t.Fatal("sub/x was created through g")
	}
}

// TestAttackHardLinkWrite: a hard link inside the base directory to a
// file outside it (which an agent can make where fs.protected_hardlinks
// is 0 and Landlock is missing, or a checkout of a tree that shares
// inodes), or to .git/config: no path leaves the base and no component
// is a symlink, yet writing the name writes the other file. write_file
// and edit_file refuse a file with more than one link.
func TestAttackHardLinkWrite(t *testing.T) {
	f, base, outside := newFiles(t)
	mustWrite(t, filepath.Join(base, ".git", "config"), "[core]\n")
	must(t, os.Link(outside, filepath.Join(base, "h")))
	must(t, os.Link(filepath.Join(base, ".git", "config"), filepath.Join(base, "g")))
	for _, name := range []string{"h", "g"} {
		var s session
		_, patch, err := f.Read(ReadIn{Path: name})
		must(t, err)
		s.apply(t, patch)
		_, _, err = f.Write(s.state, WriteIn{Path: name, Content: "[core]\n\tfsmonitor = touch pwned\n"})
		wantRefused(t, err, "hard links")
		_, _, err = f.Edit(s.state, EditIn{Path: name, OldString: "[core]", NewString: "[core]\n\tfsmonitor = touch pwned"})
		wantRefused(t, err, "hard links")
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret\n" {
		t.Fatalf("outside.txt is now %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(base, ".git", "config")); string(b) != "[core]\n" {
		t.Fatalf(".git/config is now %q", b)
	}
}
