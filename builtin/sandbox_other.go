//go:build !linux

package builtin

func runSandboxChild() {}

func landlockABI() int { return 0 }
