package main

import (
	"context"
	"io"
)

// runAudit is `toolbus audit` (audit.go in full once the trail lands).
func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, _ := newFlagSet("audit", stderr)
	return usageError(fs, "audit: not built yet")
}
