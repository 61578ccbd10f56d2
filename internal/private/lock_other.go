//go:build !unix

package private

import "os"

// Lock opens the lock file path; no lock is taken on this platform.
func Lock(path string, try bool) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}
