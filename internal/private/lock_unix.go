//go:build unix

package private

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Lock opens the lock file path (made 0600) and flocks it exclusively,
// waiting for its holder, or with try failing at once with ErrLocked. A
// symlink or another user's file is refused, never followed. Closing the
// file releases the lock.
func Lock(path string, try bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("the lock file %s is a symbolic link; refusing to follow it (someone else may have made it: check the directory, then remove it)", path)
	}
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || !Owned(fi) {
		f.Close()
		return nil, fmt.Errorf("the lock file %s is not a regular file of this process's user; refusing it", path)
	}
	how := syscall.LOCK_EX
	if try {
		how |= syscall.LOCK_NB
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
