package skills

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAttackMaterializerRoot: a local user who prepared the root (a link
// to a directory of theirs or to nothing, a directory others may write,
// a file) must see it refused, nothing created through the link and
// nothing removed from where it points (NewMaterializer's root now made by
// internal/private.Mkdir).
func TestAttackMaterializerRoot(t *testing.T) {
	dir := t.TempDir()
	theirs := filepath.Join(dir, "theirs")
	if err := os.Mkdir(theirs, 0o700); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(theirs, "sha256-keep")
	if err := os.Mkdir(keep, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	dangling := filepath.Join(dir, "dangling")
	open := filepath.Join(dir, "open")
	file := filepath.Join(dir, "file")
	for _, err := range []error{
		os.Symlink(theirs, link), os.Symlink(filepath.Join(dir, "made"), dangling),
		os.Mkdir(open, 0o700), os.Chmod(open, 0o777), os.WriteFile(file, nil, 0o600),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, root := range []string{link, dangling, open, file, link + "/"} {
		if _, err := NewMaterializer(NewCatalogue(Config{}), root); err == nil {
			t.Errorf("NewMaterializer(%s) accepted it", root)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the linked directory's contents were removed: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "made")); err == nil {
		t.Error("the dangling link's target was created")
	}
}
