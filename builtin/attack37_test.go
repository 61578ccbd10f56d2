package builtin

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/skills"
	"github.com/toolbus/toolbus/store"
)

// TestAttack37SkillOfAnotherUser (session 37, red team: held): bob's
// private skill, once his command used it, stays on disk beside every other
// skill (a directory per version, kept while the skill is current), and
// every agent's commands run as the same shell user. Alice's agent, which
// may not load bob's skill, names its directory (learned or guessed) in
// her commands, with her own skill or none: Landlock grants a command read
// access to the system directories, the workdir, its TMPDIR and its own
// skill's directory only, so nothing of bob's is read or listed.
func TestAttack37SkillOfAnotherUser(t *testing.T) {
	if !hooked.Load() || landlockABI() == 0 {
		t.Skip("no Landlock here (no launcher, or the kernel has none): the denials are not checked")
	}
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	objects, err := store.SkillsStore(t.Context(), js, bus.NewSubjects(""), 1)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	mustWrite(t, filepath.Join(src, "notes", "SKILL.md"), "---\nname: notes\ndescription: Shared notes.\n---\nx\n")
	mustWrite(t, filepath.Join(src, "diary", "SKILL.md"), "---\nname: diary\ndescription: Bob's diary.\n---\nx\n")
	mustWrite(t, filepath.Join(src, "diary", "secret.txt"), "bob-secret-7f3a\n")
	if _, err := skills.Push(t.Context(), objects, filepath.Join(src, "notes"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := skills.Push(t.Context(), objects, filepath.Join(src, "diary"), "bob"); err != nil {
		t.Fatal(err)
	}
	cat := skills.NewCatalogue(skills.Config{Objects: objects})
	if err := cat.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := len(cat.All()); n != 2 {
			return fmt.Errorf("%d skills", n)
		}
		return nil
	})
	m, err := skills.NewMaterializer(cat, filepath.Join(t.TempDir(), "skills"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	s := newShell(t, Config{Skills: m, ShellAllow: []string{"cat", "ls"}})

	out, err := s.Run(t.Context(), "bob", ShellIn{Command: `cat "$SKILL_DIR/secret.txt"`, Skill: "diary"})
	d := regexp.MustCompile(`files are in (\S+) \(\$SKILL_DIR\)`).FindStringSubmatch(out)
	if err != nil || d == nil || !strings.Contains(out, "bob-secret-7f3a") {
		t.Fatalf("bob's own skill: %q %v", out, err)
	}
	bobs := d[1]
	if _, err := os.Stat(filepath.Join(bobs, "secret.txt")); err != nil {
		t.Fatalf("bob's skill is not kept on disk after his call (%v): nothing to attack", err)
	}
	if out, err := s.Run(t.Context(), "alice", ShellIn{Command: "ls", Skill: "diary"}); err == nil || !strings.Contains(err.Error(), `no skill called "diary"`) {
		t.Fatalf("alice loads bob's skill: %q %v", out, err)
	}
	for _, skill := range []string{"notes", ""} {
		for _, cmd := range []string{"cat " + bobs + "/secret.txt", "cat < " + bobs + "/secret.txt", "ls " + filepath.Dir(bobs), "ls " + bobs} {
			out, err := s.Run(t.Context(), "alice", ShellIn{Command: cmd, Skill: skill})
			if strings.Contains(out, "bob-secret-7f3a") || strings.Contains(out, filepath.Base(bobs)+"\n") || strings.Contains(out, "secret.txt\n") {
				t.Errorf("alice (skill %q) ran %q: %q %v", skill, cmd, out, err)
			}
		}
	}
}
