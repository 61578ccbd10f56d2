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

func (t *tree) open(p string, flag int, perm fs.FileMode) (*os.File, error) {
	return t.root.OpenFile(p, flag, perm)
}

func (t *tree) stat(p string) (fs.FileInfo, error) { return t.root.Stat(p) }

func (t *tree) mkdirs(dir string) error { return t.root.MkdirAll(dir, 0o755) }

func (t *tree) readDir(dir string) ([]fs.DirEntry, error) {
	return fs.ReadDir(t.root.FS(), filepath.ToSlash(dir))
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
