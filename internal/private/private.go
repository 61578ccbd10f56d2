// Package private checks and makes directories only this user may use, so
// another local user cannot change what the router runs or reads.
package private

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrLocked is Lock's answer when try is set and another holds the lock.
var ErrLocked = errors.New("locked by another process")

// Check refuses dir unless it is a directory (not a symlink) owned by this
// process's user whose mode has none of the bits of deny (0o077: nobody
// else may do anything; 0o027: the group may read and enter). what names
// the use in the errors ("skills' files").
func Check(dir string, deny fs.FileMode, what string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (a symlink?); refusing it for %s", dir, what)
	}
	if perm := fi.Mode().Perm(); perm&deny != 0 {
		return fmt.Errorf("%s has mode %#o: %s; refusing it for %s (chmod 700)", dir, perm, who(deny), what)
	}
	if uid, ok := ownerOf(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to this process (uid %d); refusing it for %s", dir, uid, os.Geteuid(), what)
	}
	return nil
}

// who says whom the refused bits let in.
func who(deny fs.FileMode) string {
	if deny&0o070 == 0o070 {
		return "other users may reach it"
	}
	return "others may reach or group members may write it"
}

// Mkdir makes dir with mode 0700 when it is missing (its parent must
// exist) and checks it with Check either way.
func Mkdir(dir string, deny fs.FileMode, what string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return Check(dir, deny, what)
}

// Owned reports whether fi's file belongs to this process's user (true
// where the platform does not say).
func Owned(fi fs.FileInfo) bool {
	uid, ok := ownerOf(fi)
	return !ok || uid == os.Geteuid()
}

// Ancestors refuses dir when a directory above it lets another user swap it
// (another owner than this user and root, or writable without the sticky
// bit: issue 26).
func Ancestors(dir, what string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if real, err = filepath.Abs(real); err != nil {
		return err
	}
	for p := filepath.Dir(real); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if uid, ok := ownerOf(fi); ok && uid != 0 && uid != os.Geteuid() {
			return fmt.Errorf("%s, above %s, belongs to uid %d, who could replace it; refusing it for %s", p, dir, uid, what)
		}
		if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
			return fmt.Errorf("%s, above %s, has mode %#o: others could replace it; refusing it for %s", p, dir, fi.Mode().Perm(), what)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// WriteFile writes r to path, 0600, by a temporary file and rename (a
// planted link is replaced, never followed), returning the bytes written.
func WriteFile(path string, r io.Reader) (int64, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o600)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return n, err
}
