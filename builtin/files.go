package builtin

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/permission"
	"github.com/toolbus/toolbus/schemas"
	"github.com/toolbus/toolbus/worker"
)

// Bounds of the file tools' output.
const (
	defaultReadLimit = 2000  // lines read_file returns unless limit says
	maxLineChars     = 2000  // a longer line is cut
	maxListEntries   = 1000  // paths list_files returns
	maxMatches       = 200   // lines search_files returns
	maxOutputChars   = 30000 // characters of any file tool's output
	maxSearchFile    = 10 << 20
	maxReadFile      = 16 << 20
)

// Files serves the file tools in one base directory; create it with
// NewFiles. A path is resolved (symlinks followed as the permission rules
// follow them, refused if it leaves the base), judged, then opened following
// no symlink (openat2 on Linux, else through an os.Root), so a swap in
// between is refused, not followed (docs/builtin.md "Paths").
type Files struct{ tree }

// tree is the base directory as the file tools see it: where paths resolve
// (resolveIn) and how results are opened without following symlinks
// (beneath_linux.go; an os.Root elsewhere).
type tree struct {
	base string   // absolute, symlinks resolved
	root *os.Root // the base directory: Lstat, and every open but on Linux
	fd   int      // the base directory's descriptor (Linux; -1 elsewhere)
}

// NewFiles returns the file tools confined to dir.
func NewFiles(dir string) (*Files, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("builtin: workdir: %w", err)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("builtin: workdir %s is not a directory", dir)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("builtin: workdir: %w", err)
	}
	fd, err := openBase(real)
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("builtin: workdir: %w", err)
	}
	return &Files{tree{base: real, root: root, fd: fd}}, nil
}

// Base returns the base directory (absolute, symlinks resolved).
func (f *Files) Base() string { return f.base }

// resolve turns an input path into one relative to the base directory with
// every existing symlink resolved (a missing tail kept as written), refusing
// anything that leaves the base, lexically or through a link. The result is
// what the checks judge and what f.open opens.
func (f *Files) resolve(tool, p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%s refused: the path contains a NUL character", tool)
	}
	full := p
	if !filepath.IsAbs(p) {
		full = filepath.Join(f.base, p)
	}
	full = filepath.Clean(full)
	if !within(f.base, full) {
		return "", fmt.Errorf("%s refused: %q is outside the base directory %s", tool, p, f.base)
	}
	switch rel, ok := f.resolveIn(f.relOS(full)); {
	case ok:
		return rel, nil
	case within(f.base, f.abs(rel)):
		return "", fmt.Errorf("%s refused: %q has more symlinks than can be followed (a loop, or over 40)", tool, p)
	}
	return "", fmt.Errorf("%s refused: %q resolves (through a symlink) outside the base directory %s", tool, p, f.base)
}

// resolveIn resolves rel's symlinks as permission rules see them
// (permission.Resolve) and returns the result relative to the base ("."
// for itself); false when it lies outside, or when a component is still a
// symlink (Resolve gave up), which no opener may then follow to a file the
// rules did not judge.
func (t *tree) resolveIn(rel string) (string, bool) {
	r := permission.Resolve(filepath.Join(t.base, rel))
	rel = t.relOS(r)
	return rel, within(t.base, r) && !t.linkIn(rel)
}

// linkIn says whether a component of rel (relative to the base directory,
// no symlinks expected) is a symlink; a missing component ends the look.
func (t *tree) linkIn(rel string) bool {
	p := ""
	for _, c := range strings.Split(filepath.ToSlash(rel), "/") {
		p = filepath.Join(p, c)
		fi, err := t.root.Lstat(p)
		if err != nil {
			return false
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return true
		}
	}
	return false
}

func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

// relOS is the absolute p (inside the base) relative to the base.
func (t *tree) relOS(p string) string {
	if r, err := filepath.Rel(t.base, p); err == nil {
		return r
	}
	return "."
}

// abs is the absolute form of p, relative to the base directory: the key
// of its read record.
func (t *tree) abs(p string) string { return filepath.Join(t.base, p) }

// inGitDir says whether the resolved path p lies inside a .git directory,
// which write_file and edit_file refuse: git runs programs its config and
// hooks name, so writing there would hand the agent every command.
func inGitDir(p string) bool {
	return slices.ContainsFunc(strings.Split(filepath.ToSlash(p), "/"), func(c string) bool { return strings.EqualFold(c, ".git") })
}

// stateReads is the session state key of the read records, keyed by the
// file's absolute path.
const stateReads = "file_reads"

// readRecord is what the session remembers of a file it read or wrote: its
// state's stateReads holds one per absolute path.
type readRecord struct {
	Size  int64 `json:"size"`
	MTime int64 `json:"mtime_ns"`
}

func recordOf(fi fs.FileInfo) readRecord {
	return readRecord{Size: fi.Size(), MTime: fi.ModTime().UnixNano()}
}

func readsPatch(p string, fi fs.FileInfo) map[string]any {
	return map[string]any{stateReads: map[string]any{p: recordOf(fi)}}
}

// checkRead refuses a write or edit of an existing file that the session
// has not read, or that changed on disk since.
func checkRead(tool, shown string, state json.RawMessage, p string, fi fs.FileInfo) error {
	var st struct {
		Reads map[string]readRecord `json:"file_reads"` // stateReads
	}
	_ = json.Unmarshal(state, &st) // none, or not JSON: no records
	rec, ok := st.Reads[p]
	if !ok {
		return fmt.Errorf("%s refused: %s exists and has not been read in this session; read it with read_file first", tool, shown)
	}
	if rec != recordOf(fi) {
		return fmt.Errorf("%s refused: %s changed on disk since it was last read (its size or modification time differ); read it again with read_file first", tool, shown)
	}
	return nil
}

// ReadIn is the input of read_file.
type ReadIn struct {
	Path   string `json:"path"`
	Offset int    `json:"offset,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	// FilePath is Path under AgentScope's names (NamesAgentScope).
	FilePath string `json:"file_path,omitempty"`
}

// Read runs read_file; it returns the text and the state patch.
func (f *Files) Read(in ReadIn) (string, any, error) {
	p, err := f.resolve("read_file", in.Path)
	if err != nil {
		return "", nil, err
	}
	fh, err := f.open(p, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, fmt.Errorf("read_file refused: %s does not exist", in.Path)
	}
	if err != nil {
		return "", nil, f.fail("read_file refused", in.Path, err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	switch {
	case err != nil:
		return "", nil, fmt.Errorf("read_file refused: %v", err)
	case fi.IsDir():
		return "", nil, fmt.Errorf("read_file refused: %s is a directory; use list_files", in.Path)
	case !fi.Mode().IsRegular():
		return "", nil, fmt.Errorf("read_file refused: %s is not a regular file", in.Path)
	case fi.Size() > maxReadFile:
		return "", nil, fmt.Errorf("read_file refused: %s is %d bytes, more than %d", in.Path, fi.Size(), maxReadFile)
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxReadFile+1))
	switch {
	case err != nil:
		return "", nil, fmt.Errorf("read_file refused: %v", err)
	case len(data) > maxReadFile:
		return "", nil, fmt.Errorf("read_file refused: %s is more than %d bytes", in.Path, maxReadFile)
	case !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0:
		return "", nil, fmt.Errorf("read_file refused: %s is not a UTF-8 text file", in.Path)
	}
	offset, limit := max(in.Offset, 1), cmp.Or(max(in.Limit, 0), defaultReadLimit)
	var b strings.Builder
	lines := slices.Collect(strings.Lines(string(data)))
	shown := 0
	for i := offset - 1; i < len(lines) && shown < limit; i++ {
		line := strings.TrimRight(lines[i], "\r\n")
		if utf8.RuneCountInString(line) > maxLineChars {
			line = string([]rune(line)[:maxLineChars]) + " [line cut]"
		}
		if b.Len()+len(line) > maxOutputChars {
			fmt.Fprintf(&b, "[output cut at line %d of %d; read on with offset %d]\n", i, len(lines), i+1)
			break
		}
		fmt.Fprintf(&b, "%6d\t%s\n", i+1, line)
		shown++
	}
	switch {
	case len(lines) == 0:
		b.WriteString("(the file is empty)")
	case offset > len(lines):
		fmt.Fprintf(&b, "(the file has %d lines; offset %d is past its end)", len(lines), offset)
	case offset-1+shown < len(lines) && !strings.Contains(b.String(), "[output cut"):
		fmt.Fprintf(&b, "(lines %d-%d of %d; read on with offset %d)", offset, offset-1+shown, len(lines), offset+shown)
	}
	return strings.TrimRight(b.String(), "\n"), readsPatch(f.abs(p), fi), nil
}

// WriteIn is the input of write_file.
type WriteIn struct {
	Path     string `json:"path"`
	Content  string `json:"content"`
	FilePath string `json:"file_path,omitempty"` // as ReadIn's
}

// Write runs write_file against the session state (the read records).
func (f *Files) Write(state json.RawMessage, in WriteIn) (string, any, error) {
	p, fi, err := f.target("write_file", in.Path)
	if err != nil {
		return "", nil, err
	}
	mode, verb := fs.FileMode(0o644), "Created"
	if fi != nil {
		if err := checkRead("write_file", in.Path, state, f.abs(p), fi); err != nil {
			return "", nil, err
		}
		mode, verb = fi.Mode().Perm(), "Wrote"
	}
	if dir := filepath.Dir(p); dir != "." {
		if err := f.mkdirs(dir); err != nil {
			return "", nil, f.fail("write_file refused", in.Path, err)
		}
	}
	nfi, err := f.put(p, []byte(in.Content), mode)
	if err != nil {
		return "", nil, f.fail("write_file failed", in.Path, err)
	}
	return fmt.Sprintf("%s %s (%d bytes).", verb, filepath.ToSlash(p), len(in.Content)), readsPatch(f.abs(p), nfi), nil
}

// target resolves the path a write or edit names and describes the file
// there (nil when there is none yet), refusing a path inside .git and
// anything but a regular file with one link: a hard link leaves no path
// outside the base directory or in .git, yet writing it would change the
// file under its other names, which may be.
func (f *Files) target(tool, shown string) (string, fs.FileInfo, error) {
	p, err := f.resolve(tool, shown)
	if err != nil {
		return "", nil, err
	}
	if inGitDir(p) {
		return "", nil, fmt.Errorf("%s refused: %s is inside a .git directory; the file tools do not write git's own files (its config and hooks run programs)", tool, shown)
	}
	fi, err := f.stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return p, nil, nil
	case err != nil:
		return "", nil, f.fail(tool+" refused", shown, err)
	case fi.IsDir():
		return "", nil, fmt.Errorf("%s refused: %s is a directory", tool, shown)
	case !fi.Mode().IsRegular():
		return "", nil, fmt.Errorf("%s refused: %s is not a regular file", tool, shown)
	case hardLinks(fi) > 1:
		return "", nil, fmt.Errorf("%s refused: %s has %d hard links; writing it would change the file under its other names too, which may lie outside the base directory or inside .git", tool, shown, hardLinks(fi))
	}
	return p, fi, nil
}

// EditIn is the input of edit_file.
type EditIn struct {
	Path       string `json:"path"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all,omitempty"`
	FilePath   string `json:"file_path,omitempty"` // as ReadIn's
}

// Edit runs edit_file against the session state (the read records).
func (f *Files) Edit(state json.RawMessage, in EditIn) (string, any, error) {
	p, fi, err := f.target("edit_file", in.Path)
	switch {
	case err != nil:
		return "", nil, err
	case fi == nil:
		return "", nil, fmt.Errorf("edit_file refused: %s does not exist; create it with write_file", in.Path)
	case fi.Size() > maxReadFile:
		return "", nil, fmt.Errorf("edit_file refused: %s is %d bytes, more than %d", in.Path, fi.Size(), maxReadFile)
	case in.OldString == in.NewString:
		return "", nil, fmt.Errorf("edit_file refused: old_string and new_string are identical; there is nothing to change")
	case in.OldString == "":
		return "", nil, fmt.Errorf("edit_file refused: old_string is empty; give the exact text to replace")
	}
	if err := checkRead("edit_file", in.Path, state, f.abs(p), fi); err != nil {
		return "", nil, err
	}
	data, err := f.readAll(p, fi)
	if err != nil {
		return "", nil, f.fail("edit_file refused", in.Path, err)
	}
	text := string(data)
	n := strings.Count(text, in.OldString)
	switch {
	case n == 0:
		return "", nil, fmt.Errorf("edit_file refused: old_string was not found in %s; read the file again and copy the text exactly", in.Path)
	case n > 1 && !in.ReplaceAll:
		return "", nil, fmt.Errorf("edit_file refused: old_string appears %d times in %s; give more surrounding text so that it is unique, or set replace_all to replace every occurrence", n, in.Path)
	}
	if !in.ReplaceAll {
		n = 1
	}
	// The edited file stays within what read_file reads, checked before
	// anything is built: replace_all of a short, frequent old_string by a
	// long new_string would otherwise ask for n times new_string at once.
	if size := int64(len(text)) + int64(n)*(int64(len(in.NewString))-int64(len(in.OldString))); size > maxReadFile {
		return "", nil, fmt.Errorf("edit_file refused: the edited %s would be %d bytes, more than %d; replace fewer occurrences or shorter text", in.Path, size, maxReadFile)
	}
	nfi, err := f.put(p, []byte(strings.Replace(text, in.OldString, in.NewString, n)), fi.Mode().Perm())
	if err != nil {
		return "", nil, f.fail("edit_file failed", in.Path, err)
	}
	return fmt.Sprintf("Replaced %d occurrence(s) in %s.", n, filepath.ToSlash(p)), readsPatch(f.abs(p), nfi), nil
}

// readAll reads the regular file p that stat described as fi: no more
// than fi's size plus one byte (the file may have grown since), and
// refused when it is no longer a regular file or the read goes past that.
func (f *Files) readAll(p string, fi fs.FileInfo) ([]byte, error) {
	fh, err := f.open(p, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if now, err := fh.Stat(); err != nil || !now.Mode().IsRegular() {
		return nil, errChanged
	}
	data, err := io.ReadAll(io.LimitReader(fh, fi.Size()+1))
	if err == nil && int64(len(data)) != fi.Size() {
		err = errChanged
	}
	return data, err
}

// put writes data to p (replacing an existing file's content) and returns
// what the file looks like afterwards. It writes nothing but to a regular
// file with one link, checked on the descriptor before it truncates, so a
// FIFO or a hard link made after the checks is not written.
func (f *Files) put(p string, data []byte, mode fs.FileMode) (fs.FileInfo, error) {
	fh, err := f.open(p, os.O_WRONLY|os.O_CREATE, mode)
	if err != nil {
		return nil, err
	}
	if fi, err := fh.Stat(); err != nil || !fi.Mode().IsRegular() || hardLinks(fi) > 1 {
		fh.Close()
		return nil, errChanged
	}
	if err := fh.Truncate(0); err != nil {
		fh.Close()
		return nil, err
	}
	_, werr := fh.Write(data)
	fi, serr := fh.Stat()
	return fi, cmp.Or(werr, fh.Close(), serr)
}

// The errors of an open that a change of the tree after the resolution
// caused.
var (
	// errEscapes: the path now resolves outside the base directory (the
	// words of os.Root's own refusal, which isEscape reads).
	errEscapes = errors.New("path escapes from parent")
	// errSwapped: a symlink appeared on the resolved path.
	errSwapped = errors.New("a symlink appeared on the resolved path")
	// errChanged: the file is no longer the regular file judged.
	errChanged = errors.New("the file changed while it was being opened")
)

// fail words an error of an open: an escape or a link swapped in on the
// judged path says so, anything else as it is.
func (f *Files) fail(what, shown string, err error) error {
	switch {
	case isEscape(err):
		return fmt.Errorf("%s: %q resolves (through a symlink) outside the base directory %s", what, shown, f.base)
	case errors.Is(err, errSwapped), errors.Is(err, errChanged):
		return fmt.Errorf("%s: %q changed after it was checked (a symlink or another kind of file appeared on it); nothing was opened through it, try again", what, shown)
	}
	return fmt.Errorf("%s: %v", what, err)
}

// isEscape says whether err is an escape: errEscapes, or os.Root refusing a
// path that leaves it (unexported error, stable text).
func isEscape(err error) bool {
	return err != nil && (errors.Is(err, errEscapes) || strings.Contains(err.Error(), "path escapes from parent"))
}

// ListIn is the input of list_files.
type ListIn struct {
	Pattern string `json:"pattern,omitempty"`
	Path    string `json:"path,omitempty"`
}

// A walk's answers when the call's context ended, and when fn ended it.
var errDeadline, errStop = errors.New("deadline"), errors.New("stop")

// walk calls fn for every regular file under dir (relative to the base;
// root is the directory the walk started from), depth first in name order,
// opening each directory without following links (a swapped or symlinked
// directory is not entered; a symlink to a regular file inside root counts).
// fn gets each file's path and the path it resolves to (real, relative to
// the base: what to open). It returns errStop when fn returned false, and
// errDeadline once ctx is done.
func (f *Files) walk(ctx context.Context, root, dir string, fn func(p, real string, fi fs.FileInfo) bool) error {
	if ctx.Err() != nil {
		return errDeadline
	}
	entries, err := f.readDir(dir)
	if err != nil {
		return nil // unreadable parts are skipped
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		if ctx.Err() != nil {
			return errDeadline
		}
		p := filepath.Join(dir, e.Name())
		if e.IsDir() {
			if err := f.walk(ctx, root, p, fn); err != nil {
				return err
			}
			continue
		}
		real := p
		if e.Type()&fs.ModeSymlink != 0 {
			r, ok := f.resolveUnder(root, p)
			if !ok {
				continue
			}
			real = r
		}
		fi, err := f.stat(real)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if !fn(p, real, fi) {
			return errStop
		}
	}
	return nil
}

// resolveUnder is resolveIn, true only when the result lies in root (the
// directory a walk started from, relative to the base).
func (t *tree) resolveUnder(root, p string) (string, bool) {
	r, ok := t.resolveIn(p)
	return r, ok && (root == "." || within(root, r))
}

// stopped is the refusal of a walk that the call's deadline (or a cancel)
// ended.
func stopped(tool string) error {
	return fmt.Errorf("%s stopped: the call's time ran out while walking the files; narrow the path or the pattern", tool)
}

// relTo is p (relative to the base) relative to dir (relative to the
// base), with /.
func relTo(dir, p string) string {
	if r, err := filepath.Rel(dir, p); err == nil {
		p = r
	}
	return filepath.ToSlash(p)
}

// List runs list_files: files under path matching pattern (relative to path;
// ** crosses directories; default every file), sorted, until ctx ends.
func (f *Files) List(ctx context.Context, in ListIn) (string, error) {
	root, err := f.resolve("list_files", in.Path)
	if err != nil {
		return "", err
	}
	if fi, err := f.stat(root); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("list_files refused: %s is not a directory", in.Path)
	}
	pattern := cmp.Or(in.Pattern, "**")
	g, err := compileGlob(pattern)
	if err != nil {
		return "", fmt.Errorf("list_files refused: the pattern %q is not a valid glob: %v", pattern, err)
	}
	var out []string
	more := false
	err = f.walk(ctx, root, root, func(p, _ string, _ fs.FileInfo) bool {
		if g.match(relTo(root, p)) {
			if len(out) == maxListEntries {
				more = true
				return false
			}
			out = append(out, filepath.ToSlash(p))
		}
		return true
	})
	if errors.Is(err, errDeadline) {
		return "", stopped("list_files")
	}
	if len(out) == 0 {
		return fmt.Sprintf("No files match %q.", pattern), nil
	}
	slices.Sort(out)
	text := strings.Join(out, "\n")
	if more {
		text += fmt.Sprintf("\n[listing cut at %d paths; narrow the pattern or the path]", maxListEntries)
	}
	return text, nil
}

// glob is a compiled pattern: /-separated segments, each a filepath.Match
// pattern or "**" (any number of whole segments), runs of "**" collapsed.
type glob struct{ segs []string }

// compileGlob checks pattern and collapses consecutive ** segments.
func compileGlob(pattern string) (glob, error) {
	var segs []string
	for _, s := range strings.Split(pattern, "/") {
		if s == "**" && len(segs) > 0 && segs[len(segs)-1] == "**" {
			continue
		}
		if s != "**" {
			if _, err := filepath.Match(s, ""); err != nil {
				return glob{}, err
			}
		}
		segs = append(segs, s)
	}
	return glob{segs: segs}, nil
}

// match matches a /-separated path (permission.MatchSegments: at most
// len(pattern segments) × len(path segments) segment matches).
func (g glob) match(p string) bool { return permission.MatchSegments(g.segs, strings.Split(p, "/")) }

// Bounds of a search_files pattern (schemas.PatternCost).
const (
	maxSearchClasses = 64
	maxSearchProgram = 1 << 16
)

// SearchIn is the input of search_files.
type SearchIn struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path,omitempty"`
	Glob    string `json:"glob,omitempty"`
}

// Search runs search_files: lines matching an RE2 expression, as
// path:line:text, in path order, bounded. It stops when ctx ends.
func (f *Files) Search(ctx context.Context, in SearchIn) (string, error) {
	// Repetitions multiply Go's program (a{1000} × 3000: 2 s, 700 MB) and a
	// Unicode class is slow to parse: bounded before compiling (TestAttackSearchPatternCost).
	if classes, program := schemas.PatternCost(in.Pattern, maxSearchClasses); classes > maxSearchClasses || program > maxSearchProgram {
		return "", fmt.Errorf("search_files refused: the pattern is too costly to compile (at most %d Unicode classes and about %d instructions, which repetition counts multiply): use fewer or smaller repetitions", maxSearchClasses, maxSearchProgram)
	}
	re, err := regexp.Compile(in.Pattern)
	if err != nil {
		return "", fmt.Errorf("search_files refused: the pattern is not an RE2 regular expression: %v", err)
	}
	root, err := f.resolve("search_files", in.Path)
	if err != nil {
		return "", err
	}
	fi, err := f.stat(root)
	if err != nil {
		return "", fmt.Errorf("search_files refused: %s does not exist", in.Path)
	}
	var g glob
	if in.Glob != "" {
		if g, err = compileGlob(in.Glob); err != nil {
			return "", fmt.Errorf("search_files refused: the glob %q is not valid: %v", in.Glob, err)
		}
	}
	type file struct{ name, real string } // as shown, and as opened (walk)
	files := []file{{root, root}}
	switch {
	case fi.IsDir():
		files = nil
		err := f.walk(ctx, root, root, func(p, real string, fi fs.FileInfo) bool {
			target := relTo(root, p)
			if !strings.Contains(in.Glob, "/") {
				target = path.Base(target)
			}
			if (in.Glob == "" || g.match(target)) && fi.Size() <= maxSearchFile {
				files = append(files, file{p, real})
			}
			return true
		})
		if errors.Is(err, errDeadline) {
			return "", stopped("search_files")
		}
		slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.name, b.name) })
	case fi.Size() > maxSearchFile:
		return "", fmt.Errorf("search_files refused: %s is %d bytes, more than %d", in.Path, fi.Size(), maxSearchFile)
	}
	var b strings.Builder
	n := 0
	cut := false
files:
	for _, file := range files {
		if ctx.Err() != nil {
			return "", stopped("search_files")
		}
		fh, err := f.open(file.real, os.O_RDONLY, 0)
		if err != nil {
			continue
		}
		if fi, err := fh.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() > maxSearchFile {
			fh.Close()
			continue
		}
		// Bounded however the file grows while it is read; the deadline
		// is looked at every few thousand lines.
		sc := bufio.NewScanner(io.LimitReader(fh, maxSearchFile))
		sc.Buffer(make([]byte, 64<<10), maxSearchFile)
		line := 0
		for sc.Scan() {
			line++
			if line%4096 == 0 && ctx.Err() != nil {
				fh.Close()
				return "", stopped("search_files")
			}
			t := sc.Bytes()
			if bytes.IndexByte(t, 0) >= 0 || !utf8.Valid(t) {
				break // a binary file
			}
			if !re.Match(t) {
				continue
			}
			s := string(t)
			if utf8.RuneCountInString(s) > 500 {
				s = string([]rune(s)[:500]) + " [line cut]"
			}
			entry := fmt.Sprintf("%s:%d:%s\n", filepath.ToSlash(file.name), line, s)
			if n == maxMatches || b.Len()+len(entry) > maxOutputChars {
				cut = true
				fh.Close()
				break files
			}
			b.WriteString(entry)
			n++
		}
		fh.Close()
	}
	if n == 0 {
		return fmt.Sprintf("No matches for %q.", in.Pattern), nil
	}
	text := strings.TrimRight(b.String(), "\n")
	if cut {
		text += fmt.Sprintf("\n[results cut at %d matches; narrow the pattern, the path or the glob]", n)
	}
	return text, nil
}

// File tool schemas, written by hand so that descriptions are exact; the
// properties the AgentScope schemas share come first.
const (
	pathProp    = `"path":{"type":"string","description":"The file, relative to the base directory or absolute inside it."}`
	offsetProp  = `"offset":{"type":"integer","minimum":1,"description":"The first line to read, from 1."}`
	contentProp = `"content":{"type":"string","description":"The file's whole new content."}`
	editProps   = `"old_string":{"type":"string","description":"The exact text to replace; it must appear once unless replace_all is set."},` +
		`"new_string":{"type":"string","description":"The text to put in its place; it must differ from old_string."},` +
		`"replace_all":{"type":"boolean","description":"Replace every occurrence of old_string.","default":false}`
	searchProps = `"pattern":{"type":"string","description":"An RE2 regular expression matched against each line."},` +
		`"path":{"type":"string","description":"The directory or file to search (default: the base directory)."},` +
		`"glob":{"type":"string","description":"Only files whose name (or, with a /, whose path) matches this glob."}`

	readSchema = `{"type":"object","properties":{` + pathProp + `,` + offsetProp + `,` +
		`"limit":{"type":"integer","minimum":1,"description":"How many lines to read (default 2000)."}},"required":["path"]}`
	writeSchema = `{"type":"object","properties":{` + pathProp + `,` + contentProp + `},"required":["path","content"]}`
	editSchema  = `{"type":"object","properties":{` + pathProp + `,` + editProps + `},"required":["path","old_string","new_string"]}`
	listSchema  = `{"type":"object","properties":{"pattern":{"type":"string","description":"A glob relative to path, such as *.go or **/*.md; ** crosses directories. Default: every file."},` +
		`"path":{"type":"string","description":"The directory to list (default: the base directory)."}}}`
	searchSchema = `{"type":"object","properties":{` + searchProps + `},"required":["pattern"]}`
)

// fileDef is a file tool's definition; base, where its relative paths
// resolve, lets permission rules judge the real file (docs/protocol.md 6.4).
func fileDef(name, desc, schema string, readOnly bool, base string) bus.ToolDef {
	return bus.ToolDef{Name: name, Description: desc, InputSchema: json.RawMessage(schema), ReadOnly: readOnly, ConcurrencySafe: readOnly,
		StateInjected: true, RuleMatcher: bus.MatcherPath, RuleField: "path", PathBase: base, TimeoutMS: 60000}
}

// registerFiles registers f's operations as a worker's tools under the names
// profile names (Config.Names): toolbus's or AgentScope's.
func registerFiles(w *worker.Worker, f *Files, names string) error {
	as := names == NamesAgentScope
	where := " Paths are relative to the base directory " + f.base + " (or absolute inside it); nothing outside it can be reached."
	// def picks the profile's name, description and schema, and the field
	// its rules match (asRuleField).
	def := func(name, asName, desc, asDesc, schema, asSchema string, readOnly bool) bus.ToolDef {
		if !as {
			return fileDef(name, desc+where, schema, readOnly, f.base)
		}
		d := fileDef(asName, cmp.Or(asDesc, desc)+where, asSchema, readOnly, f.base)
		d.RuleField = asRuleField[asName]
		return d
	}
	return cmp.Or( // the first error
		fileTool(w, def("read_file", "Read", "Read a text file, with line numbers (from 1); use offset and limit for long files.", "", readSchema, asReadSchema, true),
			func(in *ReadIn) (*string, string) { return &in.Path, in.FilePath },
			func(_ context.Context, _ *worker.Call, in ReadIn) (string, any, error) { return f.Read(in) }),
		fileTool(w, def("write_file", "Write", "Write a whole file, creating it (and its directories) when needed. An existing file must have been read with read_file first, unchanged since.",
			"Write a whole file, creating it when needed. An existing file must have been read with Read first, unchanged since.", writeSchema, asWriteSchema, false),
			func(in *WriteIn) (*string, string) { return &in.Path, in.FilePath },
			func(_ context.Context, c *worker.Call, in WriteIn) (string, any, error) { return f.Write(c.State, in) }),
		fileTool(w, def("edit_file", "Edit", "Replace exact text in a file: old_string must appear exactly once unless replace_all is set. The file must have been read with read_file first, unchanged since.",
			"Replace exact text in a file: old_string must appear exactly once unless replace_all is set. The file must have been read with Read first, unchanged since.", editSchema, asEditSchema, false),
			func(in *EditIn) (*string, string) { return &in.Path, in.FilePath },
			func(_ context.Context, c *worker.Call, in EditIn) (string, any, error) { return f.Edit(c.State, in) }),
		fileTool(w, def("list_files", "Glob", "List files matching a glob (** crosses directories), sorted.", "", listSchema, asGlobSchema, true),
			func(in *ListIn) (*string, string) { return &in.Path, in.Path },
			func(ctx context.Context, _ *worker.Call, in ListIn) (string, any, error) {
				text, err := f.List(ctx, in)
				return text, nil, err
			}),
		fileTool(w, def("search_files", "Grep", "Search files for lines matching an RE2 regular expression; prints path:line:text, bounded.", "", searchSchema, asGrepSchema, true),
			func(in *SearchIn) (*string, string) { return &in.Path, in.Path },
			func(ctx context.Context, _ *worker.Call, in SearchIn) (string, any, error) {
				text, err := f.Search(ctx, in)
				return text, nil, err
			}),
	)
}

// fileTool registers one file tool. paths gives the input's path field and
// its file_path: the path must be the string the rules read at the
// definition's rule field (rulePath) before run sees it. The answer is run's
// text once its session-state patch is applied.
func fileTool[T any](w *worker.Worker, d bus.ToolDef, paths func(*T) (*string, string), run func(context.Context, *worker.Call, T) (string, any, error)) error {
	return worker.Register(w, d, func(ctx context.Context, c *worker.Call, in T) (string, error) {
		p, fp := paths(&in)
		if d.RuleField == "file_path" {
			*p = fp
		}
		if err := rulePath(c.Input, d.RuleField, *p); err != nil {
			return "", err
		}
		text, patch, err := run(ctx, c, in)
		if err == nil && patch != nil {
			err = c.PatchState(patch)
		}
		return text, err // the text is not sent with an error
	})
}

// asRuleField is the input field AgentScope's rules match, per tool: the
// one its schema names the path by (Glob and Grep keep path).
var asRuleField = map[string]string{"Read": "file_path", "Write": "file_path", "Edit": "file_path", "Glob": "path", "Grep": "path"}

// rulePath refuses a call whose decoded path is not the string the rules
// read at the exact key field of the raw input: encoding/json matches keys
// case-insensitively ("PATH" fills Path) while the rules do not, so an input
// with both would be judged by one path and open another.
func rulePath(raw json.RawMessage, field, decoded string) error {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return nil // the typed decode refused it already, or it is empty
	}
	if exact, _ := m[field].(string); exact != decoded {
		return fmt.Errorf("refused: the input names its path under a key differing from %q only in case; the permission rules judged %q", field, exact)
	}
	return nil
}
