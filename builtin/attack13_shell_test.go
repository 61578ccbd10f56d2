package builtin

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAttackSplitPrefix: split names its outputs prefix + a generated
// suffix (aa, ab ... or, with -a 1, a ... z), so a prefix that starts
// with a dot makes protected names no word of the command holds:
// "split -a 1 -l 1 x .gi" writes .git (a gitfile: "gitdir: elsewhere")
// at the 20th line, "split -a 2 x .bash" .bashrc. The check refuses a
// dot-name prefix.
func TestAttackSplitPrefix(t *testing.T) {
	dir := t.TempDir()
	s := newShell(t, Config{WorkDir: dir, ShellAllow: []string{"split"}})
	for _, cmd := range []string{
		"split -a 1 -l 1 x .gi",
		"split -a 2 -b 1 x .bash",
		"split -l1 -a1 -- x .en",
		"split x sub/.gitconf",
		"split --suffix-length=1 x .GI",
	} {
		if err := s.checkAllowed(cmd); err == nil {
			t.Errorf("%q accepted", cmd)
		}
	}
	for _, cmd := range []string{"split -l 1 x", "split -l 1 x part.", "split -b 1k data.csv out/chunk_", "split -t . x y"} {
		if err := s.checkAllowed(cmd); err != nil {
			t.Errorf("%q refused: %v", cmd, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
		t.Fatal(".git exists")
	}
}

// TestAttackGzipNames: gzip -d takes more suffixes off than the one
// after the last dot (-gz, -z, _z: ".bashrc-gz" decompresses to
// .bashrc, ".git-z" to a .git gitfile), and -N restores the name stored
// in the archive's header, which printf can write (".bashrc" from
// evil.gz). Both wrote protected names no word held.
func TestAttackGzipNames(t *testing.T) {
	dir := t.TempDir()
	s := newShell(t, Config{WorkDir: dir, ShellAllow: []string{"gzip", "printf"}})
	for _, cmd := range []string{
		"gzip -d .bashrc-gz",
		"gzip -d .git-z",
		"gzip -d -- .profile_z",
		"gzip -d sub/.ENV-GZ",
		"gzip -dN evil.gz",
		"gzip -d -N evil.gz",
		"gzip --decompress --name evil.gz",
		"gzip -d --na evil.gz",
	} {
		if err := s.checkAllowed(cmd); err == nil {
			t.Errorf("%q accepted", cmd)
		}
	}
	for _, cmd := range []string{"gzip -d x.gz", "gzip -d x-gz", "gzip -9 x", "gzip -dn x.gz", "gzip -c x"} {
		if err := s.checkAllowed(cmd); err != nil {
			t.Errorf("%q refused: %v", cmd, err)
		}
	}
}
