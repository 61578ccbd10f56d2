package skills_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/skills"
)

// TestExampleSkills keeps examples/skills valid, and runs its script.
func TestExampleSkills(t *testing.T) {
	found, errs, err := skills.LoadDir("../examples/skills")
	if err != nil || len(errs) != 0 {
		t.Fatalf("examples: %v %v", err, errs)
	}
	var names []string
	for _, s := range found {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"keep-notes", "release-notes"}) {
		t.Fatalf("example skills %v", names)
	}
	if !slices.Contains(found[1].Resources(), "scripts/changes.sh") {
		t.Fatalf("release-notes resources %v", found[1].Resources())
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", filepath.Join("..", "examples", "skills", "release-notes", "scripts", "changes.sh"))
	abs, _ := filepath.Abs(cmd.Args[1])
	cmd.Args[1] = abs
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "not a git repository") {
		t.Fatalf("outside a checkout: %v %s", err, out)
	}
}
