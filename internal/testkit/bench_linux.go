//go:build linux

package testkit

import (
	"bytes"
	"os"
	"strconv"
)

// WriteCalls is how many write system calls the process has made so far
// (/proc/self/io syscw); -1 when it cannot tell.
func WriteCalls() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("syscw: ")); ok {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
