package builtin

import (
	"context"
	"fmt"
	"io"
	"os"
)

// envShellChild makes the test binary a process that runs one shell
// command (the value: "dir\x00command") and then blocks, for the test that
// kills the process running a tool.
const envShellChild = "TOOLBUS_TEST_SHELL_CHILD"

// runShellChild is TestMain's hook for envShellChild; false when it is
// not set.
func runShellChild() bool {
	v, ok := os.LookupEnv(envShellChild)
	if !ok {
		return false
	}
	var dir, cmd string
	for i := 0; i < len(v); i++ {
		if v[i] == 0 {
			dir, cmd = v[:i], v[i+1:]
			break
		}
	}
	s, err := NewShell(ShellConfig{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	out, err := s.Run(context.Background(), "", ShellIn{Command: cmd})
	fmt.Println(out, err)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes stdin or kills us
	return true
}
