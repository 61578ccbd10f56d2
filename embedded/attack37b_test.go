package embedded

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAttack37bRoomyNotInProducts (session 37, red team b: held): Roomy
// declares a 1 TiB JetStream disk limit for tests, the bench and the soak;
// a router's embedded server given it would write past the disk's room
// instead of refusing at nats-server's default (75 % of the free disk).
// No package the shipped binaries (router, toolbus, toolworker) are built
// from names it, nor links the bench or the test kit that do.
func TestAttack37bRoomyNotInProducts(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}|{{.Dir}}|{{join .GoFiles \",\"}}{{end}}",
		"../cmd/router", "../cmd/toolbus", "../cmd/toolworker").Output()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(out)) {
		path, rest, _ := strings.Cut(strings.TrimSpace(line), "|")
		dir, files, _ := strings.Cut(rest, "|")
		if !strings.HasPrefix(path, "github.com/toolbus/toolbus") {
			continue
		}
		if strings.HasSuffix(path, "/bench") || strings.Contains(path, "testkit") || strings.Contains(path, "toolbus-bench") {
			t.Errorf("a shipped binary links %s", path)
		}
		for _, f := range strings.Split(files, ",") {
			if f == "" || path == "github.com/toolbus/toolbus/embedded" && f == "embedded.go" {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "Roomy") {
				t.Errorf("%s/%s names Roomy", path, f)
			}
		}
	}
}
