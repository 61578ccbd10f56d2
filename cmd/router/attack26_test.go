package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestSecureDirParentSwap (held-out attack, issue 26): a --secure DIR or
// --data DIR whose parent another user may write (0777 without the
// sticky bit) is refused, although DIR itself is private: that user could
// rename DIR away while the router runs and put a directory of their own
// there, whose nats-server.conf the router reloads within a second when
// users.json changes. A sticky parent (/tmp) is fine.
func TestSecureDirParentSwap(t *testing.T) {
	open := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(open, "secure")
	err := run(t.Context(), []string{"--secure", dir, "--listen", "127.0.0.1:-1", "--data", t.TempDir()}, &testkit.Buffer{}, &testkit.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "others could replace it") {
		t.Fatalf("--secure under a 0777 parent: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "nats-server.conf")); !os.IsNotExist(err) {
		t.Fatal("users were generated in a refused directory")
	}
	if _, err := storeDir(filepath.Join(open, "data"), "127.0.0.1:4222"); err == nil || !strings.Contains(err.Error(), "others could replace it") {
		t.Fatalf("--data under a 0777 parent: %v", err)
	}
	// The sticky bit keeps others from renaming what is not theirs.
	if err := os.Chmod(open, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := secureMode(dir, &testkit.Buffer{}); err != nil {
		t.Fatalf("under a sticky parent: %v", err)
	}
	if _, err := storeDir(filepath.Join(open, "data"), "127.0.0.1:4222"); err != nil {
		t.Fatalf("--data under a sticky parent: %v", err)
	}
}
