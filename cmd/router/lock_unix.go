//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockStore takes an exclusive lock on the JetStream store directory dir
// (creating it), so a second router cannot open a store a running one
// uses; unlock releases it. The lock is the kernel's (flock), so it goes
// with the process, however it ends.
func lockStore(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store %s: %w", dir, err)
	}
	path := filepath.Join(dir, "toolbus-router.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", dir, err)
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
