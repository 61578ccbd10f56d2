//go:build !unix

package main

import "os"

// lockStore creates dir; this platform gets no lock (see lock_unix.go).
func lockStore(dir string) (unlock func(), err error) {
	return func() {}, os.MkdirAll(dir, 0o700)
}
