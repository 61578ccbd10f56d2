//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/toolbus/toolbus/internal/private"
)

// lockStore takes an exclusive flock on the store directory dir, so a second
// router cannot open a running one's store; unlock releases it (so does the
// process's end). The lock file is opened without following a link and must
// be this user's regular file.
func lockStore(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, "toolbus-router.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("store %s: the lock file %s is a symbolic link; refusing to follow it (someone else may have made it: check the directory, then remove it)", dir, path)
	}
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", dir, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || !private.Owned(fi) {
		f.Close()
		return nil, fmt.Errorf("store %s: the lock file %s is not a regular file of this process's user; refusing it", dir, path)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("store %s is in use by another router (lock %s): give this one its own --data, or stop the other", dir, path)
		}
		return nil, fmt.Errorf("store %s: lock: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
