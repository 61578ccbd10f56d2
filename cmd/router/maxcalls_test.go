package main

import (
	"io"
	"strings"
	"testing"
)

// --max-calls is at most bus.MaxCancelCalls (1024): a cancel names at most
// that many ids (protocol 3.5), so a larger batch could not be cancelled by
// name whole. The router refuses to start, before it opens anything.
func TestMaxCallsCeiling(t *testing.T) {
	err := run(t.Context(), []string{"--max-calls", "1025", "--listen", "127.0.0.1:0"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--max-calls 1025: at most 1024") {
		t.Fatalf("run --max-calls 1025: %v", err)
	}
}
