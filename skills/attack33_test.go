package skills_test

import (
	"path"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/skills"
)

// FuzzUnpack (session 33, red team: a skill archive is read by every router
// that loads it, from whatever whoever may write P_skills put there): no
// archive panics Unpack, and one it takes is within a skill's limits, each
// path clean and relative.
func FuzzUnpack(f *testing.F) {
	for _, files := range []map[string][]byte{
		{"SKILL.md": []byte("---\nname: a\ndescription: b\n---\nbody\n")},
		{"SKILL.md": []byte("x"), "scripts/run.sh": []byte("#!/bin/sh\necho hi\n"), "a/b/c.txt": nil},
	} {
		b, err := skills.Pack(files)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		files, err := skills.Unpack(data)
		if err != nil {
			return
		}
		total := 0
		for p, b := range files {
			if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") ||
				strings.ContainsAny(p, "\\\x00") || len(p) > skills.MaxPath || len(b) > skills.MaxFile {
				t.Fatalf("taken: %q (%d bytes)", p, len(b))
			}
			total += len(b)
		}
		if len(files) > skills.MaxFiles || total > skills.MaxSkill {
			t.Fatalf("taken: %d files, %d bytes", len(files), total)
		}
	})
}
