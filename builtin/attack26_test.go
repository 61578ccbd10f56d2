package builtin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShellHeldOutAttack26: the held-out attacker's routes into .git with
// an allow-list (issue 26, "Done when"). Each is refused before anything
// runs, and the repository's config and hooks are left as they were.
func TestShellHeldOutAttack26(t *testing.T) {
	dir := t.TempDir()
	s := newShell(t, Config{WorkDir: dir, ShellAllow: []string{"git", "sed", "chmod", "printf", "mkdir", "cat", "gzip", "mv", "cp", "split", "install"}})
	if out, err := s.Run(t.Context(), "", ShellIn{Command: "git init -q r3 && git init -q --bare r5 && mkdir src"}); err != nil || !strings.HasPrefix(out, "Exit code: 0") {
		t.Fatalf("setup: %q %v", out, err)
	}
	cfg := filepath.Join(dir, "r3", ".git", "config")
	before, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for cmd, want := range map[string]string{
		// sed -iSUFFIX renames the original to SUFFIX with '*' replaced
		// by the file's name: a hook (or a config) moved into .git.
		"printf 'touch pwned\\n' > pre-commit && chmod +x pre-commit && sed -i'r3/.git/hooks/*' -e '' pre-commit": `may not write "r3/.git/hooks/pre-commit" (sed -i (its backup))`,
		"printf '[core]\\n' > config && sed --in-place='r3/.git/*' -e '' config":                                  `may not write "r3/.git/config" (sed -i (its backup))`,
		"printf 'x' > rc && sed -i'.bash*' -e '' rc":                                                              `may not write ".bashrc"`,
		"printf 'x' > y && sed -i.env -e '' y":                                                                    `.y.env`,
		"sed --follow-symlinks -i.bak -e '' x":                                                                    "--follow-symlinks with a backup suffix",
		// Names a writer derives from its operands: a compressor's output
		// (the default extension stripped, or -S's), a backup's suffix.
		"printf 'id\\n' > e && gzip e && mv e.gz .bashrc.gz && gzip -d .bashrc.gz":           `may not write ".bashrc" (gzip (its output))`,
		"printf '{}' > m && gzip -S zz m && mv mzz .mcp.jsonzz && gzip -d -S zz .mcp.jsonzz": `may not write ".mcp.json" (gzip (suffix zz))`,
		"printf x > .bash && gzip -kSrc .bash":                                               `may not write ".bashrc"`,
		"printf x > .profil && printf y > z && mv -b --suffix=e z .profil":                   `may not write ".profile"`,
		"printf x > .zsh && printf y > z && cp -b -S rc z .zsh":                              `may not write ".zshrc"`,
		// Files other tools run: direnv's .envrc, an agent host's hooks.
		"printf 'id' > .envrc":                                 `may not write ".envrc"`,
		"mkdir -p .claude && printf x > .claude/settings.json": `.claude is protected`,
		// A bracket expression matches the leading dot.
		"cp -- x r3/[.]git/config":          "a pattern that can match a name starting with a dot (r3/[.]git/config)",
		"cp -- x r3/[!a]git/config":         "a pattern that can match a name starting with a dot",
		"printf x > q && cp -- q [.]bashrc": "a pattern that can match a name starting with a dot",
		// Options of listed programs that run a program.
		"split --filter='touch pwned' x":       "split --filter runs a program",
		"split --fil='touch pwned' x":          "split --fil runs a program",
		"install -s --strip-program=touch x y": "install --strip-program runs a program",
		"install -s --strip-p touch x y":       "install --strip-p runs a program",
		// git --bare makes -C's directory the repository: a bare one whose
		// config the agent wrote, with core.worktree set to r3/.git, and
		// checkout-index writes the agent's file as r3/.git/config.
		"printf '[core]\\n\\tbare = false\\n\\tworktree = ../r3/.git\\n' > r5/config && git -C r5 --bare checkout-index -f -a": "git --bare is refused",
		// git grep -O starts the pager program it names.
		"git -C r3 grep -Otouch x":                     "git grep -Otouch runs a program",
		"git -C r3 grep --open-files-in-pager=touch x": "runs a program",
	} {
		_, err := s.Run(t.Context(), "", ShellIn{Command: cmd})
		if want == `.y.env` {
			// Not protected: y.env is an ordinary name.
			if err != nil {
				t.Errorf("%q refused: %v", cmd, err)
			}
			continue
		}
		wantRefused(t, err, want)
	}
	after, err := os.ReadFile(cfg)
	if err != nil || string(after) != string(before) {
		t.Fatalf("r3/.git/config changed: %q %v", after, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "r3", ".git", "hooks", "pre-commit")); err == nil {
		t.Fatal("a hook was planted")
	}
	for _, n := range []string{".bashrc", ".mcp.json", ".profile", ".zshrc"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s was written", n)
		}
	}
	for _, cmd := range []string{"install --strip x y", "install -s -m 755 x y", "split -b 10 x part", "install --suffix=.old -b x y"} {
		if err := s.checkAllowed(cmd); err != nil {
			t.Errorf("%q refused: %v", cmd, err)
		}
	}
	// Ordinary in-place edits, backups and compression still run.
	if out, err := s.Run(t.Context(), "", ShellIn{Command: "printf 'a\\n' > f && sed -i.bak s/a/b/ f && sed -i'old_*' s/b/c/ f && cat f.bak old_f f && gzip f && gzip -d f.gz && cp -b -S .old f g && cp -b -S .old f g && cat g.old"}); err != nil || !strings.Contains(out, "a\nb\nc\nc\n") {
		t.Fatalf("ordinary writes: %q %v", out, err)
	}
}

// TestShellNoSymlinkFromContent (held-out attack, issue 26): git apply of
// a patch that makes the symlink d -> r3/.git, then "cp evil d/config" in
// the same command, wrote r3/.git/config (the check saw no d when it
// ran). With an allow-list git writes symlinks as plain files
// (core.symlinks=false), so cp finds no directory and .git is unchanged.
func TestShellNoSymlinkFromContent(t *testing.T) {
	dir := t.TempDir()
	s := newShell(t, Config{WorkDir: dir, ShellAllow: []string{"git", "printf", "cp"}})
	if out, err := s.Run(t.Context(), "", ShellIn{Command: "git init -q r3"}); err != nil || !strings.HasPrefix(out, "Exit code: 0") {
		t.Fatalf("setup: %q %v", out, err)
	}
	cfg := filepath.Join(dir, "r3", ".git", "config")
	before, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := `printf 'diff --git a/d b/d\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n+++ b/d\n@@ -0,0 +1 @@\n+r3/.git\n\\ No newline at end of file\n' > p.diff && ` +
		`printf '[core]\n\tfsmonitor = evil\n' > evil && git apply p.diff && cp evil d/config`
	out, err := s.Run(t.Context(), "", ShellIn{Command: cmd})
	if err != nil || !strings.Contains(out, "Not a directory") {
		t.Fatalf("the attack: %q %v", out, err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "d")); err != nil || fi.Mode()&os.ModeSymlink != 0 {
		t.Fatalf("d: %v %v", fi, err)
	}
	if after, err := os.ReadFile(cfg); err != nil || string(after) != string(before) {
		t.Fatalf("r3/.git/config changed: %q %v", after, err)
	}
}
