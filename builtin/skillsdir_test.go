package builtin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/toolbus/toolbus/skills"
)

// TestSkillsDirForShellUser: a root worker (the toolworker's case, no
// parent: the user cache directory, under root's private home) puts skills
// for its default shell user (nobody) in the temp directory, and keeps them
// under parent when the shell runs as root.
func TestSkillsDirForShellUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the shell runs as another user only under root")
	}
	src := filepath.Join(t.TempDir(), "tool")
	mustWrite(t, filepath.Join(src, "SKILL.md"), "---\nname: tool\ndescription: d\n---\nx\n")
	cat := skills.NewCatalogue(skills.Config{Dirs: []string{src}})
	if err := cat.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	tmp, _ := filepath.EvalSymlinks(os.TempDir())
	parent := filepath.Join(t.TempDir(), "skills")
	for _, c := range []struct {
		cfg  Config
		want string
	}{{Config{}, tmp}, {Config{ShellAsRoot: true}, parent}} {
		m, err := SkillsMaterializer(cat, parent, "toolworker-x-", c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		dir, release, err := m.Acquire(t.Context(), "tool", "")
		if err != nil {
			t.Fatal(err)
		}
		release()
		if filepath.Dir(filepath.Dir(dir)) != c.want {
			t.Errorf("%+v: skills in %s, want under %s", c.cfg, dir, c.want)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
