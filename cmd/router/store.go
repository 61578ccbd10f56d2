package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolbus/toolbus/internal/private"
)

// storeWhat names the store in the private package's errors.
const storeWhat = "the JetStream store (give --data DIR, or remove it)"

// storeDir returns the embedded server's JetStream store directory and
// makes it. data "" is the default: DIR/toolbus/data-<listen> under the
// user's cache directory ($XDG_CACHE_HOME, else ~/.cache), one per listen
// address so two routers on one machine never share a store by accident;
// it and toolbus/ are made with mode 0700 and refused unless they are
// directories, not links, of this user that nobody else may reach
// (docs/security.md). A --data directory is made 0700 when missing; an
// existing one (links resolved) is refused when another user owns it or
// may write it.
func storeDir(data, listen string) (string, error) {
	if data != "" {
		return explicitStore(data)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no private default store: %w; give --data DIR", err)
	}
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return "", fmt.Errorf("store: %w", err)
	}
	dir := filepath.Join(cache, "toolbus")
	for _, d := range []string{dir, filepath.Join(dir, "data-"+storeName(listen))} {
		if err := private.Mkdir(d, 0o077, storeWhat); err != nil {
			return "", fmt.Errorf("store: %w", err)
		}
		dir = d
	}
	return dir, nil
}

// storeName is listen as a file name: 127.0.0.1-4222.
func storeName(listen string) string {
	return strings.NewReplacer(":", "-", "[", "", "]", "", "/", "-").Replace(listen)
}

// explicitStore makes or checks a --data directory.
func explicitStore(data string) (string, error) {
	if err := os.MkdirAll(data, 0o700); err != nil {
		return "", fmt.Errorf("store %s: %w", data, err)
	}
	real, err := filepath.EvalSymlinks(data)
	if err != nil {
		return "", fmt.Errorf("store %s: %w", data, err)
	}
	if err := private.Check(real, 0o022, storeWhat); err != nil {
		return "", fmt.Errorf("store: --data %w", err)
	}
	if err := private.Ancestors(real, storeWhat); err != nil {
		return "", fmt.Errorf("store: --data %w", err)
	}
	return data, nil
}

// secureMode makes the --secure directory private: a missing one is made
// with mode 0700; an existing one that is a link, belongs to another user
// or that others may write is refused (they could have put a server
// configuration or a seed there); one that others may only read or enter
// is set to 0700, and the router says so on out.
func secureMode(dir string, out io.Writer) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("--secure %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("--secure %s: %w", dir, err)
	}
	const what = "the roles' credentials (--secure)"
	if err := private.Check(dir, 0o022, what); err != nil {
		return fmt.Errorf("refused: %w", err)
	}
	if err := private.Ancestors(dir, what); err != nil {
		return fmt.Errorf("refused: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("--secure %s: %w", dir, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("--secure %s: %w", dir, err)
		}
		fmt.Fprintf(out, "toolbus: --secure %s had mode %#o (others could read it); fixed: it is 0700 now\n", dir, perm)
	}
	return private.Check(dir, 0o077, what)
}
