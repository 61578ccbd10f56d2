//go:build !unix

package builtin

import (
	"os"
	"os/exec"
)

func direct(*exec.Cmd, sandboxSpec) {}

func killGroup(*exec.Cmd) {}

func fileOwner(os.FileInfo) (uid, gid int, ok bool) { return 0, 0, false }
