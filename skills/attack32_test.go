package skills

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
)

// TestAttackUnpackLinksAndBombs (session 32, red team on skills uploads,
// held): an archive in P_skills (which only operators write, docs/skills.md)
// that holds a symlink, a hard link, a device, a path leaving the skill
// (`../`, absolute, `./`), a file whose header says more than a skill may
// hold, or 256 MiB of compressed zeros after its end, is refused or read no
// further than its end; nothing
// outside the archive's own regular files is ever named.
func TestAttackUnpackLinksAndBombs(t *testing.T) {
	pack := func(trailer int, hdrs ...*tar.Header) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		for _, h := range hdrs {
			h.Format, h.Mode = tar.FormatPAX, 0o644
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				if _, err := tw.Write(bytes.Repeat([]byte("x"), int(h.Size))); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(zw, zeros{}, int64(trailer)); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	skill := &tar.Header{Name: "SKILL.md", Typeflag: tar.TypeReg, Size: 1}
	for name, tc := range map[string]struct {
		hdr  *tar.Header
		want string
	}{
		"symlink":         {&tar.Header{Name: "refs/x", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, "not a regular file"},
		"hard link":       {&tar.Header{Name: "refs/x", Typeflag: tar.TypeLink, Linkname: "SKILL.md"}, "not a regular file"},
		"device":          {&tar.Header{Name: "refs/x", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}, "not a regular file"},
		"fifo":            {&tar.Header{Name: "refs/x", Typeflag: tar.TypeFifo}, "not a regular file"},
		"parent":          {&tar.Header{Name: "../x", Typeflag: tar.TypeReg, Size: 1}, "stay inside the skill"},
		"absolute":        {&tar.Header{Name: "/etc/cron.d/x", Typeflag: tar.TypeReg, Size: 1}, "must be relative"},
		"unclean":         {&tar.Header{Name: "refs/../../x", Typeflag: tar.TypeReg, Size: 1}, "stay inside the skill"},
		"dot":             {&tar.Header{Name: "./SKILL.md", Typeflag: tar.TypeReg, Size: 1}, "stay inside the skill"},
		"larger than one": {&tar.Header{Name: "refs/big", Typeflag: tar.TypeReg, Size: MaxFile + 1}, "beyond the limits"},
	} {
		files, err := Unpack(pack(0, skill, tc.hdr))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, files %v", name, err, keys(files))
		}
	}
	// Zeros after the archive's end compress to little and are never
	// read: the reader stops at the end blocks.
	files, err := Unpack(pack(256<<20, skill))
	if err != nil || len(files) != 1 {
		t.Fatalf("an archive followed by 256 MiB of zeros: %v", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func keys(m map[string][]byte) (out []string) {
	for k := range m {
		out = append(out, k)
	}
	return out
}
