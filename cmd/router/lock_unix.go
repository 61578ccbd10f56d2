//go:build unix

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"syscall"

	"github.com/toolbus/toolbus/internal/private"
)

// lockStore flocks store directory dir so a second router cannot open it;
// the lock file must be this user's regular file, not a link. It holds the
// holder's listen address, which a refused router is told to join.
func lockStore(dir, listen string) (unlock func(), err error) {
	path := filepath.Join(dir, "toolbus-router.lock")
	f, err := private.Lock(path, true)
	if errors.Is(err, private.ErrLocked) {
		f, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		other := "<the other's --listen>" // a router of before session 31 wrote none
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(f, 256))
			f.Close()
			if hostPort.Match(b) {
				other = string(b)
			}
		}
		return nil, fmt.Errorf("store %s is in use by another router (lock %s): give this one its own --data, or stop the other\n  to add a router beside it, join its server: --nats nats://%s; for a separate bus: --listen ADDR (and its own --data)", dir, path, other)
	}
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", dir, err)
	}
	if f.Truncate(0) == nil {
		_, _ = f.WriteAt([]byte(listen), 0)
	}
	return func() { f.Close() }, nil
}

// hostPort is the shape of a listen address read back from a lock file.
var hostPort = regexp.MustCompile(`^[A-Za-z0-9.:\[\]-]{1,255}$`)
