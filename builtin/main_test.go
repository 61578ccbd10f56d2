package builtin

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	RunSandboxChild()
	if runShellChild() {
		return
	}
	os.Exit(m.Run())
}
