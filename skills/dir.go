package skills

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ReadFolder reads the skill folder dir. Files are read through symlinks
// that stay inside the folder; a symlink that leaves it (or that dangles,
// or names a directory) is left out of the skill's files and reported in
// refused, so the loader refuses it like any other missing path.
func ReadFolder(dir string) (files map[string][]byte, refused []string, err error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("skills: %w", err)
	}
	if root, err = filepath.Abs(root); err != nil {
		return nil, nil, fmt.Errorf("skills: %w", err)
	}
	files = map[string][]byte{}
	total := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			return nil
		}
		real := p
		if d.Type()&fs.ModeSymlink != 0 {
			real, err = filepath.EvalSymlinks(p)
			if err != nil || !within(root, real) {
				refused = append(refused, rel)
				return nil
			}
			if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() {
				refused = append(refused, rel)
				return nil
			}
		} else if !d.Type().IsRegular() {
			refused = append(refused, rel)
			return nil
		}
		if len(files) >= MaxFiles {
			return &Error{File: dir, Rule: fmt.Sprintf("has more than %d files", MaxFiles)}
		}
		fi, err := os.Stat(real)
		if err != nil {
			return err
		}
		if fi.Size() > MaxFile {
			return &Error{File: filepath.Join(dir, rel), Rule: fmt.Sprintf("is %d bytes, larger than %d", fi.Size(), MaxFile)}
		}
		if total += int(fi.Size()); total > MaxSkill {
			return &Error{File: dir, Rule: fmt.Sprintf("holds more than %d bytes", MaxSkill)}
		}
		b, err := os.ReadFile(real)
		if err != nil {
			return err
		}
		files[rel] = b
		return nil
	})
	if err != nil {
		var se *Error
		if errors.As(err, &se) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("skills: read %s: %w", dir, err)
	}
	return files, refused, nil
}

// within reports whether p is root or below it (both absolute and clean).
func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

// LoadFolder reads and checks one skill folder.
// Symlinks that leave the folder are not part of the skill.
func LoadFolder(dir string) (*Skill, error) {
	files, _, err := ReadFolder(dir)
	if err != nil {
		return nil, err
	}
	abs, _ := filepath.Abs(dir)
	return newSkill(filepath.Base(abs), filepath.ToSlash(dir), "dir:"+abs, files)
}

// LoadDir loads the skills of dir: dir itself when it holds a SKILL.md,
// else each of its sub-folders that holds one, in name order. A skill that
// breaks a rule is left out and its error returned in errs; the others
// load. err is set only when dir itself cannot be read.
func LoadDir(dir string) (out []*Skill, errs []error, err error) {
	if _, err := os.Stat(filepath.Join(dir, File)); err == nil {
		s, err := LoadFolder(dir)
		if err != nil {
			return nil, []error{err}, nil
		}
		return []*Skill{s}, nil, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("skills: %w", err)
	}
	for _, e := range entries {
		sub := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(sub, File)); err != nil {
			continue
		}
		s, err := LoadFolder(sub)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, s)
	}
	return out, errs, nil
}
