package builtin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
)

func TestTodoWrite(t *testing.T) {
	text, list, err := WriteTodos(nil, TodoIn{})
	if err != nil || text != "Todo list cleared (0 items)." || len(list) != 0 {
		t.Fatalf("empty: %q %v %v", text, list, err)
	}
	in := TodoIn{Todos: []TodoItem{{Content: "Plan", Status: "completed"}, {Content: "Build", Status: "in_progress", Priority: "high"},
		{Content: "Ship", Status: "pending", Priority: "low"}}}
	text, list, err = WriteTodos(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	want := "2 open todo(s):\n- [x] Plan\n- [~] Build (priority: high)\n- [ ] Ship (priority: low)"
	if text != want {
		t.Fatalf("text\n%s\nwant\n%s", text, want)
	}
	if list[0].ID != "1" || list[1].ID != "2" || list[2].ID != "3" {
		t.Fatalf("ids %+v", list)
	}
	state, _ := json.Marshal(map[string]any{"todos": list})
	// Ids are kept for matching content, new items get new ones.
	_, next, err := WriteTodos(state, TodoIn{Todos: []TodoItem{{Content: "Ship", Status: "in_progress"}, {Content: "Docs", Status: "pending"},
		{Content: "Build", Status: "completed"}}})
	if err != nil {
		t.Fatal(err)
	}
	if next[0].ID != "3" || next[1].ID != "4" || next[2].ID != "2" {
		t.Fatalf("ids after rewrite %+v", next)
	}
	for _, tc := range []struct {
		name string
		in   TodoIn
		want string
	}{
		{"blank content", TodoIn{Todos: []TodoItem{{Content: "a", Status: "pending"}, {Content: "  ", Status: "pending"}}},
			"todo_write refused: item 2 has blank content; nothing was changed"},
		{"unknown status", TodoIn{Todos: []TodoItem{{Content: "a", Status: "done"}}},
			`todo_write refused: item 1 has the unknown status "done" (use pending, in_progress or completed); nothing was changed`},
		{"two in progress", TodoIn{Todos: []TodoItem{{Content: "a", Status: "in_progress"}, {Content: "b", Status: "in_progress"}}},
			"todo_write refused: 2 items are in_progress; at most one may be; nothing was changed"},
		{"unknown priority", TodoIn{Todos: []TodoItem{{Content: "a", Status: "pending", Priority: "urgent"}}},
			`todo_write refused: item 1 has the unknown priority "urgent" (use high, medium or low); nothing was changed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, l, err := WriteTodos(state, tc.in)
			if err == nil || err.Error() != tc.want || l != nil {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// session applies the state patches of file tools, as the router does.
type session struct{ state json.RawMessage }

func (s *session) apply(t *testing.T, patch any) {
	t.Helper()
	if patch == nil {
		return
	}
	b, _ := json.Marshal(patch)
	cur := s.state
	if cur == nil {
		cur = json.RawMessage(`{}`)
	}
	next, err := jsonpatch.MergePatch(cur, b)
	if err != nil {
		t.Fatal(err)
	}
	s.state = next
}

func newFiles(t *testing.T) (*Files, string, string) {
	t.Helper()
	root := t.TempDir()
	base := filepath.Join(root, "base")
	mustWrite(t, filepath.Join(base, "a.txt"), "one\ntwo\nthree\n")
	mustWrite(t, filepath.Join(root, "outside.txt"), "secret\n")
	f, err := NewFiles(base)
	if err != nil {
		t.Fatal(err)
	}
	return f, f.Base(), filepath.Join(root, "outside.txt")
}

func mustWrite(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func wantRefused(t *testing.T, err error, substr string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), substr) {
		t.Fatalf("error %v, want one containing %q", err, substr)
	}
}

func TestConfinement(t *testing.T) {
	f, base, outside := newFiles(t)
	if err := os.Symlink(outside, filepath.Join(base, "leak.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(base, "up")); err != nil {
		t.Fatal(err)
	}
	var s session
	for _, p := range []string{"../outside.txt", outside, "/etc/passwd", "sub/../../outside.txt", "leak.txt", "up/outside.txt", "up/new.txt"} {
		_, _, err := f.Read(ReadIn{Path: p})
		wantRefused(t, err, "read_file refused:")
		if !strings.Contains(err.Error(), "outside the base directory") {
			t.Errorf("%s: %v", p, err)
		}
		_, _, err = f.Write(s.state, WriteIn{Path: p, Content: "x"})
		wantRefused(t, err, "outside the base directory")
		_, _, err = f.Edit(s.state, EditIn{Path: p, OldString: "secret", NewString: "x"})
		wantRefused(t, err, "outside the base directory")
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret\n" {
		t.Fatal("the file outside changed")
	}
	_, err := f.List(t.Context(), ListIn{Path: ".."})
	wantRefused(t, err, "outside the base directory")
	// Listing and search do not follow the symlinks out.
	out, err := f.List(t.Context(), ListIn{})
	if err != nil || out != "a.txt" {
		t.Fatalf("list %q %v", out, err)
	}
	out, err = f.Search(t.Context(), SearchIn{Pattern: "secret"})
	if err != nil || out != `No matches for "secret".` {
		t.Fatalf("search %q %v", out, err)
	}
	// An absolute path inside is fine.
	text, _, err := f.Read(ReadIn{Path: filepath.Join(base, "a.txt"), Offset: 2, Limit: 1})
	if err != nil || text != "     2\ttwo\n(lines 2-2 of 3; read on with offset 3)" {
		t.Fatalf("read %q %v", text, err)
	}
}

func TestReadBeforeWrite(t *testing.T) {
	f, base, _ := newFiles(t)
	var s session
	// A new file needs no read.
	text, patch, err := f.Write(s.state, WriteIn{Path: "dir/new.txt", Content: "hello\n"})
	if err != nil || text != "Created dir/new.txt (6 bytes)." {
		t.Fatalf("create %q %v", text, err)
	}
	s.apply(t, patch)
	// The write counts as a read.
	if _, patch, err = f.Edit(s.state, EditIn{Path: "dir/new.txt", OldString: "hello", NewString: "bye"}); err != nil {
		t.Fatal(err)
	}
	s.apply(t, patch)
	// An existing file that was not read.
	_, _, err = f.Write(s.state, WriteIn{Path: "a.txt", Content: "x"})
	wantRefused(t, err, "write_file refused: a.txt exists and has not been read in this session")
	_, _, err = f.Edit(s.state, EditIn{Path: "a.txt", OldString: "one", NewString: "1"})
	wantRefused(t, err, "edit_file refused: a.txt exists and has not been read in this session")
	text, patch, err = f.Read(ReadIn{Path: "a.txt"})
	if err != nil || text != "     1\tone\n     2\ttwo\n     3\tthree" {
		t.Fatalf("read %q %v", text, err)
	}
	s.apply(t, patch)
	// Changed on disk after the read: same size, another modification time.
	p := filepath.Join(base, "a.txt")
	mustWrite(t, p, "ONE\ntwo\nthree\n")
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	_, _, err = f.Edit(s.state, EditIn{Path: "a.txt", OldString: "two", NewString: "2"})
	wantRefused(t, err, "edit_file refused: a.txt changed on disk since it was last read")
	_, _, err = f.Write(s.state, WriteIn{Path: "a.txt", Content: "x"})
	wantRefused(t, err, "changed on disk since it was last read")
	_, patch, _ = f.Read(ReadIn{Path: "a.txt"})
	s.apply(t, patch)
	text, patch, err = f.Write(s.state, WriteIn{Path: "a.txt", Content: "new\n"})
	if err != nil || text != "Wrote a.txt (4 bytes)." {
		t.Fatalf("write %q %v", text, err)
	}
	s.apply(t, patch)
}

func TestEdit(t *testing.T) {
	f, _, _ := newFiles(t)
	var s session
	mustWrite(t, filepath.Join(f.Base(), "b.txt"), "x = 1\nx = 1\ny = 2\n")
	_, patch, _ := f.Read(ReadIn{Path: "b.txt"})
	s.apply(t, patch)
	_, _, err := f.Edit(s.state, EditIn{Path: "b.txt", OldString: "x = 1", NewString: "x = 1"})
	wantRefused(t, err, "edit_file refused: old_string and new_string are identical")
	_, _, err = f.Edit(s.state, EditIn{Path: "b.txt", OldString: "z = 3", NewString: "z = 4"})
	wantRefused(t, err, "edit_file refused: old_string was not found in b.txt")
	_, _, err = f.Edit(s.state, EditIn{Path: "b.txt", OldString: "x = 1", NewString: "x = 2"})
	wantRefused(t, err, "edit_file refused: old_string appears 2 times in b.txt")
	_, _, err = f.Edit(s.state, EditIn{Path: "missing.txt", OldString: "a", NewString: "b"})
	wantRefused(t, err, "does not exist")
	text, patch, err := f.Edit(s.state, EditIn{Path: "b.txt", OldString: "x = 1", NewString: "x = 2", ReplaceAll: true})
	if err != nil || text != "Replaced 2 occurrence(s) in b.txt." {
		t.Fatalf("replace_all %q %v", text, err)
	}
	s.apply(t, patch)
	text, _, err = f.Edit(s.state, EditIn{Path: "b.txt", OldString: "y = 2", NewString: "y = 3"})
	if err != nil || text != "Replaced 1 occurrence(s) in b.txt." {
		t.Fatalf("edit after edit %q %v", text, err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.Base(), "b.txt")); string(b) != "x = 2\nx = 2\ny = 3\n" {
		t.Fatalf("content %q", b)
	}
}

func TestListAndSearch(t *testing.T) {
	f, base, _ := newFiles(t)
	mustWrite(t, filepath.Join(base, "src", "main.go"), "package main\nfunc main() {}\n")
	mustWrite(t, filepath.Join(base, "src", "deep", "x.go"), "package deep\n")
	mustWrite(t, filepath.Join(base, "README.md"), "# hi\nfunc in docs\n")
	for _, tc := range []struct {
		in   ListIn
		want string
	}{
		{ListIn{}, "README.md\na.txt\nsrc/deep/x.go\nsrc/main.go"},
		{ListIn{Pattern: "*.md"}, "README.md"},
		{ListIn{Pattern: "**/*.go"}, "src/deep/x.go\nsrc/main.go"},
		{ListIn{Pattern: "*.go", Path: "src"}, "src/main.go"},
		{ListIn{Pattern: "*.rs"}, `No files match "*.rs".`},
	} {
		if got, err := f.List(t.Context(), tc.in); err != nil || got != tc.want {
			t.Errorf("list %+v: %q %v, want %q", tc.in, got, err, tc.want)
		}
	}
	if got, err := f.Search(t.Context(), SearchIn{Pattern: `^func \w+`, Glob: "*.go"}); err != nil || got != "src/main.go:2:func main() {}" {
		t.Fatalf("search %q %v", got, err)
	}
	if got, err := f.Search(t.Context(), SearchIn{Pattern: `func`, Path: "README.md"}); err != nil || got != "README.md:2:func in docs" {
		t.Fatalf("search one file %q %v", got, err)
	}
	_, err := f.Search(t.Context(), SearchIn{Pattern: `(`})
	wantRefused(t, err, "not an RE2 regular expression")
	var big strings.Builder
	for range 500 {
		big.WriteString("match\n")
	}
	mustWrite(t, filepath.Join(base, "big.txt"), big.String())
	got, _ := f.Search(t.Context(), SearchIn{Pattern: "match"})
	if n := strings.Count(got, "\n"); n != maxMatches || !strings.HasSuffix(got, "[results cut at 200 matches; narrow the pattern, the path or the glob]") {
		t.Fatalf("bounded search: %d lines, tail %q", n, got[len(got)-80:])
	}
}

func newShell(t *testing.T, cfg Config) *Shell {
	t.Helper()
	if cfg.WorkDir == "" {
		cfg.WorkDir = t.TempDir()
	}
	// These tests write into root-owned temporary directories; the
	// default user (not root) has its own test, TestShellNotRootByDefault.
	if cfg.ShellUser == "" {
		cfg.ShellAsRoot = true
	}
	s, err := NewShell(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestShell(t *testing.T) {
	dir := t.TempDir()
	s := newShell(t, Config{WorkDir: dir})
	ctx := context.Background()
	out, err := s.Run(ctx, "", ShellIn{Command: "pwd; echo oops >&2; exit 3"})
	real, _ := filepath.EvalSymlinks(dir)
	if err != nil || out != "Exit code: 3\nstdout:\n"+real+"\nstderr:\noops" {
		t.Fatalf("run %q %v", out, err)
	}
	// Output limit, per stream.
	out, err = s.Run(ctx, "", ShellIn{Command: "head -c 40000 /dev/zero | tr '\\0' a; head -c 10 /dev/zero | tr '\\0' b >&2"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, strings.Repeat("a", MaxStreamChars)+"\n[output cut after 30000 characters; 10000 more not shown]") ||
		strings.Contains(out, strings.Repeat("a", MaxStreamChars+1)) || !strings.HasSuffix(out, "stderr:\nbbbbbbbbbb") {
		t.Fatalf("cut output: ...%q", out[max(0, len(out)-200):])
	}
	// Timeout: the command and its children end; the output so far is kept.
	start := time.Now()
	_, err = s.Run(ctx, "", ShellIn{Command: "echo started; sleep 30 & sleep 30", TimeoutMS: 3000})
	wantRefused(t, err, "shell: the command timed out after 3s and was stopped; output so far:\nExit code: -1\nstdout:\nstarted")
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("timeout took %v", d)
	}
	_, err = s.Run(ctx, "", ShellIn{Command: "true", TimeoutMS: 600001})
	wantRefused(t, err, "more than 600000")
	// Allow-list.
	s = newShell(t, Config{WorkDir: dir, ShellAllow: []string{"echo", "ls", "git", "/bin/echo"}})
	if out, err := s.Run(ctx, "", ShellIn{Command: "echo hi && ls | /bin/echo x"}); err != nil || !strings.HasPrefix(out, "Exit code: 0") {
		t.Fatalf("allowed: %q %v", out, err)
	}
	for cmd, want := range map[string]string{
		"rm -rf x":          `the program "rm" is not allowed; allowed programs: echo, ls, git, /bin/echo`,
		"echo a; cat /x":    `the program "cat" is not allowed`,
		"echo $(rm -rf x)":  `the program "rm" is not allowed`,
		"(curl x)":          `the program "curl" is not allowed`,
		"echo a | sh -c ls": `the program "sh" is not allowed`,
	} {
		_, err := s.Run(ctx, "", ShellIn{Command: cmd})
		wantRefused(t, err, "shell refused: "+want)
	}
}
