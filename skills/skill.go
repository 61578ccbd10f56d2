// Package skills serves Agent Skills (docs/protocol.md section 10,
// docs/skills.md): Parse checks a SKILL.md, a Catalogue gathers skills from
// folders and the watched P_skills object store, a View is what one session
// sees, and a Materializer puts a skill's files on disk for its scripts.
package skills

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
)

// Limits on a skill's files, so one skill cannot fill a router's memory.
const (
	// MaxFile bounds one file of a skill, SKILL.md included.
	MaxFile = 8 << 20
	// MaxSkill bounds the sum of a skill's files.
	MaxSkill = 32 << 20
	// MaxFiles bounds how many files a skill has.
	MaxFiles = 4096
	// MaxPath bounds a resource path and maxComponent each of its names
	// (Linux's PATH_MAX and NAME_MAX: a longer one cannot be materialised).
	MaxPath      = 4096
	maxComponent = 255
)

// Skill is one checked skill with its files.
type Skill struct {
	Meta
	// Body is the markdown after the front matter.
	Body string
	// Source says where the skill came from: "dir:<folder>" or
	// "bus:<object store>/<object>".
	Source string
	// User is the user the skill is scoped to; "" for everyone.
	User string
	// Digest is "sha256:<hex>" of the skill's whole content (every file's
	// path and bytes), the same wherever the skill is stored.
	Digest string

	files     map[string][]byte // path → content, SKILL.md included
	resources []string          // SKILL.md first, the others sorted
}

// newSkill is New with where, the folder's path as errors name it.
func newSkill(folder, where, source string, files map[string][]byte) (*Skill, error) {
	file := where + "/" + File
	data, ok := files[File]
	if !ok {
		return nil, &Error{File: file, Rule: "the folder has no SKILL.md"}
	}
	if len(files) > MaxFiles {
		return nil, &Error{File: where, Rule: fmt.Sprintf("has %d files, more than %d", len(files), MaxFiles)}
	}
	total := 0
	for p, b := range files {
		if err := checkPath(p); err != nil {
			return nil, &Error{File: where + "/" + p, Rule: err.Error()}
		}
		if len(b) > MaxFile {
			return nil, &Error{File: where + "/" + p, Rule: fmt.Sprintf("is %d bytes, larger than %d", len(b), MaxFile)}
		}
		total += len(b)
	}
	if total > MaxSkill {
		return nil, &Error{File: where, Rule: fmt.Sprintf("holds %d bytes, more than %d", total, MaxSkill)}
	}
	meta, body, err := Parse(file, folder, data)
	if err != nil {
		return nil, err
	}
	s := &Skill{Meta: meta, Body: body, Source: source, files: maps.Clone(files), Digest: Digest(files)}
	others := slices.DeleteFunc(slices.Sorted(maps.Keys(files)), func(p string) bool { return p == File })
	s.resources = append([]string{File}, others...)
	return s, nil
}

// checkPath reports why p is not a clean relative resource path.
func checkPath(p string) error {
	switch {
	case len(p) > MaxPath:
		return fmt.Errorf("path %.64q... is longer than %d bytes", p, MaxPath)
	case slices.ContainsFunc(strings.Split(p, "/"), func(name string) bool { return len(name) > maxComponent }):
		return fmt.Errorf("path %.64q... has a name longer than %d bytes", p, maxComponent)
	case p == "" || strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q must be relative", p)
	case path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("path %q must be clean and stay inside the skill", p)
	case strings.ContainsRune(p, '\\') || strings.ContainsRune(p, 0):
		return fmt.Errorf("path %q has a backslash or NUL", p)
	}
	return nil
}

// Digest returns "sha256:<hex>" over every path and content of files,
// in path order; the encoding is unambiguous (lengths before bytes).
func Digest(files map[string][]byte) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range slices.Sorted(maps.Keys(files)) {
		h.Write(binary.BigEndian.AppendUint64(n[:0], uint64(len(p))))
		h.Write([]byte(p))
		h.Write(binary.BigEndian.AppendUint64(n[:0], uint64(len(files[p]))))
		h.Write(files[p])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Resources returns the skill's resource paths: SKILL.md first, the
// others sorted. The slice must not be modified.
func (s *Skill) Resources() []string { return s.resources }

// File returns the content of the resource at p (a path of Resources).
func (s *Skill) File(p string) ([]byte, bool) {
	b, ok := s.files[p]
	return b, ok
}

// Files returns a copy of the skill's files, path → content.
func (s *Skill) Files() map[string][]byte { return maps.Clone(s.files) }

// withScope returns a copy of s with another source and user.
func (s *Skill) withScope(source, user string) *Skill {
	c := *s
	c.Source, c.User = source, user
	return &c
}
