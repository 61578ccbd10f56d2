//go:build !linux

package builtin

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

// Elsewhere than Linux the file tools open through the os.Root alone: no
// path leaves the base directory, but a directory swapped for a symlink
// after the resolution is followed inside it (docs/builtin.md, "Paths").

func openBase(string) (int, error) { return -1, nil }

func (f *Files) open(p string, flag int, perm fs.FileMode) (*os.File, error) {
	return f.root.OpenFile(p, flag, perm)
}

func (f *Files) stat(p string) (fs.FileInfo, error) { return f.root.Stat(p) }

func (f *Files) mkdirs(dir string) error { return f.root.MkdirAll(dir, 0o755) }

func (f *Files) readDir(dir string) ([]fs.DirEntry, error) {
	return fs.ReadDir(f.root.FS(), filepath.ToSlash(dir))
}

// hardLinks is not read here: every file counts as one link.
func hardLinks(fs.FileInfo) uint64 { return 1 }

// No sandbox launcher here: the shell starts /bin/sh itself.
const sandboxSupported = false

// launcherCommand is never called here (sandboxSupported is false).
var launcherCommand = directCommand

func runLocked(cmd *exec.Cmd) error { return cmd.Run() }

func runSandboxChild() {}

func landlockABI() int { return 0 }
