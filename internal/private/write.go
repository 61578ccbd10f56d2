package private

import (
	"io"
	"os"
	"path/filepath"
)

// WriteFile writes r to path, mode 0600, through a temporary file beside
// it and a rename: a reader sees the old file or the new one, a failed
// write leaves nothing behind, and a link planted at path is replaced,
// never followed. It returns the bytes written.
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
