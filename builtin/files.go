package builtin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus/bus"
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

// Files serves the file tools in one base directory. Create it with
// NewFiles.
type Files struct {
	base string // absolute, symlinks resolved
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
	return &Files{base: real}, nil
}

// Base returns the base directory (absolute, symlinks resolved).
func (f *Files) Base() string { return f.base }

// errRefused marks a refusal; its text is what the model reads.
func refused(format string, args ...any) error { return fmt.Errorf(format, args...) }

// resolve turns a path of the input into an absolute path inside the base
// directory, symlinks resolved (for a path that does not exist yet, those
// of its nearest existing parent). It refuses anything outside.
func (f *Files) resolve(tool, p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", refused("%s refused: the path contains a NUL character", tool)
	}
	full := p
	if !filepath.IsAbs(p) {
		full = filepath.Join(f.base, p)
	}
	full = filepath.Clean(full)
	if !within(f.base, full) {
		return "", refused("%s refused: %q is outside the base directory %s", tool, p, f.base)
	}
	// Resolve symlinks of the longest existing prefix.
	rest := ""
	cur := full
	for {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			full = filepath.Join(real, rest)
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", refused("%s refused: %q cannot be resolved: %v", tool, p, err)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", refused("%s refused: %q cannot be resolved", tool, p)
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
	if !within(f.base, full) {
		return "", refused("%s refused: %q resolves (through a symlink) to %s, outside the base directory %s", tool, p, full, f.base)
	}
	return full, nil
}

func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

// rel is p relative to the base directory, with /.
func (f *Files) rel(p string) string {
	r, err := filepath.Rel(f.base, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}

// readRecord is what the session remembers of a file it read or wrote.
type readRecord struct {
	Size  int64 `json:"size"`
	MTime int64 `json:"mtime_ns"`
}

// stateReads is the session state key of the read records, keyed by the
// file's absolute path.
const stateReads = "file_reads"

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
		Reads map[string]readRecord `json:"file_reads"`
	}
	if len(state) > 0 {
		_ = json.Unmarshal(state, &st)
	}
	rec, ok := st.Reads[p]
	if !ok {
		return refused("%s refused: %s exists and has not been read in this session; read it with read_file first", tool, shown)
	}
	if rec != recordOf(fi) {
		return refused("%s refused: %s changed on disk since it was last read (its size or modification time differ); read it again with read_file first", tool, shown)
	}
	return nil
}

// ReadIn is the input of read_file.
type ReadIn struct {
	Path   string `json:"path"`
	Offset int    `json:"offset,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// Read runs read_file; it returns the text and the state patch.
func (f *Files) Read(in ReadIn) (string, any, error) {
	p, err := f.resolve("read_file", in.Path)
	if err != nil {
		return "", nil, err
	}
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil, refused("read_file refused: %s does not exist", in.Path)
	case err != nil:
		return "", nil, refused("read_file refused: %v", err)
	case fi.IsDir():
		return "", nil, refused("read_file refused: %s is a directory; use list_files", in.Path)
	case fi.Size() > maxReadFile:
		return "", nil, refused("read_file refused: %s is %d bytes, more than %d", in.Path, fi.Size(), maxReadFile)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return "", nil, refused("read_file refused: %v", err)
	}
	if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		return "", nil, refused("read_file refused: %s is not a UTF-8 text file", in.Path)
	}
	offset, limit := max(in.Offset, 1), in.Limit
	if limit <= 0 {
		limit = defaultReadLimit
	}
	var b strings.Builder
	lines := strings.SplitAfter(string(data), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
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
	return strings.TrimRight(b.String(), "\n"), readsPatch(p, fi), nil
}

// WriteIn is the input of write_file.
type WriteIn struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Write runs write_file against the session state (the read records).
func (f *Files) Write(state json.RawMessage, in WriteIn) (string, any, error) {
	p, err := f.resolve("write_file", in.Path)
	if err != nil {
		return "", nil, err
	}
	mode := fs.FileMode(0o644)
	fi, err := os.Stat(p)
	switch {
	case err == nil && fi.IsDir():
		return "", nil, refused("write_file refused: %s is a directory", in.Path)
	case err == nil:
		if err := checkRead("write_file", in.Path, state, p, fi); err != nil {
			return "", nil, err
		}
		mode = fi.Mode().Perm()
	case !errors.Is(err, fs.ErrNotExist):
		return "", nil, refused("write_file refused: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", nil, refused("write_file refused: %v", err)
	}
	if err := os.WriteFile(p, []byte(in.Content), mode); err != nil {
		return "", nil, refused("write_file failed: %v", err)
	}
	nfi, err := os.Stat(p)
	if err != nil {
		return "", nil, refused("write_file failed: %v", err)
	}
	verb := "Created"
	if fi != nil {
		verb = "Wrote"
	}
	return fmt.Sprintf("%s %s (%d bytes).", verb, f.rel(p), len(in.Content)), readsPatch(p, nfi), nil
}

// EditIn is the input of edit_file.
type EditIn struct {
	Path       string `json:"path"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all,omitempty"`
}

// Edit runs edit_file against the session state (the read records).
func (f *Files) Edit(state json.RawMessage, in EditIn) (string, any, error) {
	p, err := f.resolve("edit_file", in.Path)
	if err != nil {
		return "", nil, err
	}
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil, refused("edit_file refused: %s does not exist; create it with write_file", in.Path)
	case err != nil:
		return "", nil, refused("edit_file refused: %v", err)
	case fi.IsDir():
		return "", nil, refused("edit_file refused: %s is a directory", in.Path)
	}
	if in.OldString == in.NewString {
		return "", nil, refused("edit_file refused: old_string and new_string are identical; there is nothing to change")
	}
	if in.OldString == "" {
		return "", nil, refused("edit_file refused: old_string is empty; give the exact text to replace")
	}
	if err := checkRead("edit_file", in.Path, state, p, fi); err != nil {
		return "", nil, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return "", nil, refused("edit_file refused: %v", err)
	}
	text := string(data)
	n := strings.Count(text, in.OldString)
	switch {
	case n == 0:
		return "", nil, refused("edit_file refused: old_string was not found in %s; read the file again and copy the text exactly", in.Path)
	case n > 1 && !in.ReplaceAll:
		return "", nil, refused("edit_file refused: old_string appears %d times in %s; give more surrounding text so that it is unique, or set replace_all to replace every occurrence", n, in.Path)
	}
	if in.ReplaceAll {
		text = strings.ReplaceAll(text, in.OldString, in.NewString)
	} else {
		text = strings.Replace(text, in.OldString, in.NewString, 1)
	}
	if err := os.WriteFile(p, []byte(text), fi.Mode().Perm()); err != nil {
		return "", nil, refused("edit_file failed: %v", err)
	}
	nfi, err := os.Stat(p)
	if err != nil {
		return "", nil, refused("edit_file failed: %v", err)
	}
	if !in.ReplaceAll {
		n = 1
	}
	return fmt.Sprintf("Replaced %d occurrence(s) in %s.", n, f.rel(p)), readsPatch(p, nfi), nil
}

// ListIn is the input of list_files.
type ListIn struct {
	Pattern string `json:"pattern,omitempty"`
	Path    string `json:"path,omitempty"`
}

// walk calls fn for every regular file under root (inside the base), never
// following a symlink out of the base directory.
func (f *Files) walk(root string, fn func(p string, fi fs.FileInfo) bool) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable parts are skipped
		}
		if d.IsDir() {
			return nil
		}
		real := p
		if d.Type()&fs.ModeSymlink != 0 {
			r, err := filepath.EvalSymlinks(p)
			if err != nil || !within(f.base, r) {
				return nil
			}
			real = r
		}
		fi, err := os.Stat(real)
		if err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		if !fn(p, fi) {
			return filepath.SkipAll
		}
		return nil
	})
}

// List runs list_files: files under path matching pattern (a glob relative
// to path; ** crosses directories; default every file), sorted.
func (f *Files) List(in ListIn) (string, error) {
	root, err := f.resolve("list_files", in.Path)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return "", refused("list_files refused: %s is not a directory", in.Path)
	}
	pattern := in.Pattern
	if pattern == "" {
		pattern = "**"
	}
	if _, err := filepath.Match(strings.ReplaceAll(pattern, "**", "*"), ""); err != nil {
		return "", refused("list_files refused: the pattern %q is not a valid glob: %v", pattern, err)
	}
	var out []string
	more := false
	_ = f.walk(root, func(p string, _ fs.FileInfo) bool {
		r, _ := filepath.Rel(root, p)
		if matchGlob(pattern, filepath.ToSlash(r)) {
			if len(out) == maxListEntries {
				more = true
				return false
			}
			out = append(out, f.rel(p))
		}
		return true
	})
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

// matchGlob matches a /-separated path against a glob whose ** segments
// match any number of path segments.
func matchGlob(pattern, p string) bool {
	return matchSegs(strings.Split(pattern, "/"), strings.Split(p, "/"))
}

func matchSegs(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if matchSegs(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, _ := filepath.Match(pat[0], segs[0]); !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

// SearchIn is the input of search_files.
type SearchIn struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path,omitempty"`
	Glob    string `json:"glob,omitempty"`
}

// Search runs search_files: lines matching an RE2 expression, as
// path:line:text, in path order, bounded.
func (f *Files) Search(in SearchIn) (string, error) {
	re, err := regexp.Compile(in.Pattern)
	if err != nil {
		return "", refused("search_files refused: the pattern is not an RE2 regular expression: %v", err)
	}
	root, err := f.resolve("search_files", in.Path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(root)
	if err != nil {
		return "", refused("search_files refused: %s does not exist", in.Path)
	}
	var files []string
	if fi.IsDir() {
		_ = f.walk(root, func(p string, fi fs.FileInfo) bool {
			r, _ := filepath.Rel(root, p)
			r = filepath.ToSlash(r)
			if in.Glob != "" {
				target := r
				if !strings.Contains(in.Glob, "/") {
					target = filepath.Base(r)
				}
				if !matchGlob(in.Glob, target) {
					return true
				}
			}
			if fi.Size() <= maxSearchFile {
				files = append(files, p)
			}
			return true
		})
	} else {
		files = []string{root}
	}
	slices.Sort(files)
	var b strings.Builder
	n := 0
	cut := false
files:
	for _, p := range files {
		fh, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), maxSearchFile)
		line := 0
		for sc.Scan() {
			line++
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
			entry := fmt.Sprintf("%s:%d:%s\n", f.rel(p), line, s)
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

// File tool schemas, written by hand so that descriptions are exact.
const (
	readSchema = `{"type":"object","properties":{"path":{"type":"string","description":"The file, relative to the base directory or absolute inside it."},` +
		`"offset":{"type":"integer","minimum":1,"description":"The first line to read, from 1."},` +
		`"limit":{"type":"integer","minimum":1,"description":"How many lines to read (default 2000)."}},"required":["path"]}`
	writeSchema = `{"type":"object","properties":{"path":{"type":"string","description":"The file, relative to the base directory or absolute inside it."},` +
		`"content":{"type":"string","description":"The file's whole new content."}},"required":["path","content"]}`
	editSchema = `{"type":"object","properties":{"path":{"type":"string","description":"The file, relative to the base directory or absolute inside it."},` +
		`"old_string":{"type":"string","description":"The exact text to replace; it must appear once unless replace_all is set."},` +
		`"new_string":{"type":"string","description":"The text to put in its place; it must differ from old_string."},` +
		`"replace_all":{"type":"boolean","description":"Replace every occurrence of old_string.","default":false}},"required":["path","old_string","new_string"]}`
	listSchema = `{"type":"object","properties":{"pattern":{"type":"string","description":"A glob relative to path, such as *.go or **/*.md; ** crosses directories. Default: every file."},` +
		`"path":{"type":"string","description":"The directory to list (default: the base directory)."}}}`
	searchSchema = `{"type":"object","properties":{"pattern":{"type":"string","description":"An RE2 regular expression matched against each line."},` +
		`"path":{"type":"string","description":"The directory or file to search (default: the base directory)."},` +
		`"glob":{"type":"string","description":"Only files whose name (or, with a /, whose path) matches this glob."}},"required":["pattern"]}`
)

func fileDef(name, desc, schema string, readOnly bool) bus.ToolDef {
	return bus.ToolDef{Name: name, Description: desc, InputSchema: json.RawMessage(schema), ReadOnly: readOnly, ConcurrencySafe: readOnly,
		StateInjected: true, RuleMatcher: bus.MatcherPath, RuleField: "path", TimeoutMS: 60000}
}

func (f *Files) register(w *worker.Worker) error {
	where := " Paths are relative to the base directory " + f.base + " (or absolute inside it); nothing outside it can be reached."
	patching := func(c *worker.Call, text string, patch any, err error) (string, error) {
		if err != nil {
			return "", err
		}
		if patch != nil {
			if err := c.PatchState(patch); err != nil {
				return "", err
			}
		}
		return text, nil
	}
	if err := worker.Register(w, fileDef("read_file", "Read a text file, with line numbers (from 1); use offset and limit for long files."+where, readSchema, true),
		func(_ context.Context, c *worker.Call, in ReadIn) (string, error) {
			text, patch, err := f.Read(in)
			return patching(c, text, patch, err)
		}); err != nil {
		return err
	}
	if err := worker.Register(w, fileDef("write_file", "Write a whole file, creating it (and its directories) when needed. An existing file must have been read with read_file first, unchanged since."+where, writeSchema, false),
		func(_ context.Context, c *worker.Call, in WriteIn) (string, error) {
			text, patch, err := f.Write(c.State, in)
			return patching(c, text, patch, err)
		}); err != nil {
		return err
	}
	if err := worker.Register(w, fileDef("edit_file", "Replace exact text in a file: old_string must appear exactly once unless replace_all is set. The file must have been read with read_file first, unchanged since."+where, editSchema, false),
		func(_ context.Context, c *worker.Call, in EditIn) (string, error) {
			text, patch, err := f.Edit(c.State, in)
			return patching(c, text, patch, err)
		}); err != nil {
		return err
	}
	if err := worker.Register(w, fileDef("list_files", "List files matching a glob (** crosses directories), sorted."+where, listSchema, true),
		func(_ context.Context, _ *worker.Call, in ListIn) (string, error) { return f.List(in) }); err != nil {
		return err
	}
	return worker.Register(w, fileDef("search_files", "Search files for lines matching an RE2 regular expression; prints path:line:text, bounded."+where, searchSchema, true),
		func(_ context.Context, _ *worker.Call, in SearchIn) (string, error) { return f.Search(in) })
}
