package skills

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
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

// TestAttackUnpackEntries (session 18, red team): a skill object whose tar
// holds a million directory headers is 1 MiB of gzip (far under the
// object bound, twice MaxSkill), and Unpack read every header, on every
// router that loads the skill, since directories were not counted. Every
// entry now counts: past twice MaxFiles the object is refused. (Only the
// operator may push skills; the bound keeps a mistake cheap.)
func TestAttackUnpackEntries(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	body := []byte("---\nname: bomb\ndescription: Many directories.\n---\nHi.\n")
	if err := tw.WriteHeader(&tar.Header{Name: File, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(body); err != nil {
		t.Fatal(err)
	}
	for range 100_000 {
		if err := tw.WriteHeader(&tar.Header{Name: "d/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		t.Fatal(err)
	}
	t.Logf("100,000 directory headers: %d bytes of gzip", buf.Len())
	if buf.Len() > MaxSkill*2/100 {
		t.Fatalf("the archive is %d bytes: it does not show a bomb", buf.Len())
	}
	if files, err := Unpack(buf.Bytes()); err == nil {
		t.Fatalf("unpacked %d files from 100,000 headers", len(files))
	}
	// A skill Pack made still unpacks.
	packed, err := Pack(map[string][]byte{File: body, "scripts/a.sh": []byte("echo\n")})
	if err != nil {
		t.Fatal(err)
	}
	if files, err := Unpack(packed); err != nil || len(files) != 2 {
		t.Fatalf("%d files, %v", len(files), err)
	}
}
