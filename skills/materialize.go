package skills

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/toolbus/toolbus/internal/private"
)

// Materializer puts skills' files on disk, a directory per version named by
// its digest, so a running script keeps its files; one is removed once
// unheld and no longer current. Safe for concurrent use.
type Materializer struct {
	cat  *Catalogue
	root string

	mu     sync.Mutex
	dirs   map[string]*materialized // digest → its directory
	writes int                      // materializations done (for tests)
}

type materialized struct {
	dir   string
	refs  int
	ready chan struct{} // closed once written (or failed)
	err   error
}

// NewMaterializer returns a Materializer under root, created 0700 or passing
// CheckPrivate; leftovers of an earlier run are removed.
func NewMaterializer(cat *Catalogue, root string) (*Materializer, error) {
	// Cleaned, so that a trailing slash does not make Lstat follow a link.
	root = filepath.Clean(root)
	if err := private.Mkdir(root, 0o027, "skills' files"); err != nil {
		return nil, fmt.Errorf("skills: materialize: %w", err)
	}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "sha256-") {
			_ = os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
	return &Materializer{cat: cat, root: root, dirs: map[string]*materialized{}}, nil
}

// Close removes the root and everything in it; Acquire fails after it.
func (m *Materializer) Close() error { return os.RemoveAll(m.root) }

// PrivateDir makes a fresh 0700 directory in parent (private; "" is the user
// cache's toolbus/skills); with gid >= 0, for a shell user other than this
// process's, a groupDir instead.
func PrivateDir(parent, pattern string, gid int) (string, error) {
	if gid >= 0 {
		return groupDir(pattern, gid)
	}
	if parent == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("skills: no directory for materialised skills: %w", err)
		}
		parent = filepath.Join(cache, "toolbus", "skills")
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", fmt.Errorf("skills: %w", err)
	}
	if err := CheckPrivate(parent); err != nil {
		return "", fmt.Errorf("skills: %w", err)
	}
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", fmt.Errorf("skills: %w", err)
	}
	return dir, nil
}

// groupDir makes a fresh directory of group gid, mode 0750, in the system
// temp directory, which a shell user can reach where it cannot enter a
// private parent: named unpredictably by a mkdir that neither follows a link
// nor reuses a directory, under the temp directory's real path, every
// directory above it root's or ours and not writable by others without the
// sticky bit (private.Ancestors), so nobody else can swap it.
func groupDir(pattern string, gid int) (string, error) {
	// The real path: a link to the temp directory could later lead elsewhere.
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	dir := ""
	if err == nil {
		dir, err = os.MkdirTemp(tmp, "toolbus-skills-"+pattern)
	}
	if err == nil {
		if err = private.Ancestors(dir, "skills' files"); err == nil {
			err = os.Chown(dir, -1, gid)
		}
		if err == nil {
			err = os.Chmod(dir, 0o750)
		}
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}
	if err != nil {
		return "", fmt.Errorf("skills: %w", err)
	}
	return dir, nil
}

// CheckPrivate refuses dir unless it is a real directory of this user that
// only its group may enter: another owner could change the scripts.
func CheckPrivate(dir string) error {
	return private.Check(dir, 0o027, "skills' files")
}

// Acquire returns the directory of skill name as user sees it, written on
// first use, and its release.
func (m *Materializer) Acquire(ctx context.Context, name, user string) (string, func(), error) {
	visible := m.cat.Skills(user)
	i := slices.IndexFunc(visible, func(c *Skill) bool { return c.Name == name })
	if i < 0 {
		return "", nil, fmt.Errorf("there is no skill called %q", name)
	}
	s := visible[i]
	m.mu.Lock()
	e, ok := m.dirs[s.Digest]
	if !ok {
		e = &materialized{dir: filepath.Join(m.root, strings.Replace(s.Digest, ":", "-", 1)), ready: make(chan struct{})}
		m.dirs[s.Digest] = e
		m.writes++
	}
	e.refs++
	m.mu.Unlock()
	if !ok {
		e.err = write(e.dir, s)
		close(e.ready)
	}
	release := func() { m.release(e) }
	select {
	case <-e.ready:
	case <-ctx.Done():
		release()
		return "", nil, ctx.Err()
	}
	if e.err != nil {
		release()
		return "", nil, e.err
	}
	return e.dir, sync.OnceFunc(release), nil
}

// write puts s's files into dir through a temporary directory, so that dir
// is complete whenever it exists.
func write(dir string, s *Skill) (err error) {
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".tmp-")
	if err != nil {
		return fmt.Errorf("skills: materialize %s: %w", s.Name, err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
			err = fmt.Errorf("skills: materialize %s: %w", s.Name, err)
		}
	}()
	for p, b := range s.files {
		full := filepath.Join(tmp, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, b, fileMode(p)); err != nil {
			return err
		}
	}
	// Readable below the root, whose mode decides who gets in, whatever the
	// umask (077 left a shell user nothing to read).
	err = filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o755)
		if !d.IsDir() {
			mode = fileMode(filepath.ToSlash(p[len(tmp)+1:]))
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		return err
	}
	_ = os.RemoveAll(dir) // a failed earlier attempt
	return os.Rename(tmp, dir)
}

// release drops one use of e and removes the directories that no call
// uses and no current skill has.
func (m *Materializer) release(e *materialized) {
	current := map[string]bool{}
	for _, s := range m.cat.All() {
		current[s.Digest] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e.refs--
	for d, x := range m.dirs {
		if x.refs == 0 && (!current[d] || x.err != nil) {
			delete(m.dirs, d)
			_ = os.RemoveAll(x.dir)
		}
	}
}

// ReadFolder reads the skill folder dir, following symlinks only inside it;
// the others are listed in refused. Each file is opened once, beneath the
// folder (os.Root: no link, however swapped in, leads out), without
// blocking (a FIFO), and read only when that descriptor is a regular file,
// at most MaxFile bytes of it: what is read is what was judged.
func ReadFolder(dir string) (files map[string][]byte, refused []string, err error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("skills: %w", err)
	}
	defer r.Close()
	files = map[string][]byte{}
	total, entries := 0, 0
	err = fs.WalkDir(r.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		// Every entry counts, as an archive's do: directories and refused
		// entries too (200,000 empty directories took each load 21 s).
		if entries++; err == nil && entries > 2*MaxFiles {
			return &Error{File: ".", Rule: fmt.Sprintf("has more than %d entries (files and directories)", 2*MaxFiles)}
		}
		if err != nil || d.IsDir() {
			return err
		}
		b, ok, err := readRegular(r, rel)
		switch {
		case err != nil:
			return err
		case !ok:
			refused = append(refused, rel)
			return nil
		case len(files) >= MaxFiles:
			return &Error{File: dir, Rule: fmt.Sprintf("has more than %d files", MaxFiles)}
		}
		if total += len(b); total > MaxSkill {
			return &Error{File: dir, Rule: fmt.Sprintf("holds more than %d bytes", MaxSkill)}
		}
		files[rel] = b
		return nil
	})
	if err != nil {
		if se, ok := errors.AsType[*Error](err); ok {
			se.File = filepath.Join(dir, se.File)
			return nil, nil, se
		}
		return nil, nil, fmt.Errorf("skills: read %s: %w", dir, err)
	}
	return files, refused, nil
}

// readRegular reads the file rel of r when it is a regular one (ok), up to
// MaxFile bytes (an *Error past it, rel relative to the folder).
func readRegular(r *os.Root, rel string) (b []byte, ok bool, err error) {
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, false, nil // a link out of the folder, a dangling one, a file gone
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, false, nil
	}
	if b, err = io.ReadAll(io.LimitReader(f, MaxFile+1)); err != nil {
		return nil, false, err
	}
	if len(b) > MaxFile {
		return nil, false, &Error{File: rel, Rule: fmt.Sprintf("is larger than %d bytes", MaxFile)}
	}
	return b, true, nil
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

// LoadDir loads dir as a skill, or else its sub-folders in name order; a bad
// skill's error goes to errs, err only when dir cannot be read.
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
