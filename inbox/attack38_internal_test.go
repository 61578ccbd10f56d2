package inbox

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestTokenFlagWarns (session 38, red team: left to the operator): a token
// given with --inbox-token is in the process's command line, which every
// local user may read (ps, /proc/<pid>/cmdline; the built-in shell under
// Landlock cannot read /proc, another local process can), and with it
// approve calls on a loopback inbox. The flag stays (scripts use it); the
// inbox warns at start, and a token file does not.
func TestTokenFlagWarns(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	if _, err := store.Setup(t.Context(), testkit.JetStream(t, nc), bus.NewSubjects(""), store.Config{}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("from-a-file-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.WriteFile(shared, []byte("from-a-file-0123456789\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		token, file, warns string
	}{{"on-the-command-line-0123", "", "process list"}, {"", file, ""}, {"", shared, "other local users"}} {
		var log bytes.Buffer
		in, err := Open(t.Context(), nc, "127.0.0.1:0", c.token, c.file, Config{Source: "test/inbox", Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		in.Close(t.Context())
		warned := strings.Contains(log.String(), "process list") || strings.Contains(log.String(), "other local users")
		if warned != (c.warns != "") || !strings.Contains(log.String(), c.warns) {
			t.Errorf("token %q, file %q: want a warning %q; log %q", c.token, c.file, c.warns, log.String())
		}
	}
}
