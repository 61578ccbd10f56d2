package life_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// maxMethods is the team's bound on the methods one type declares
// (docs/client.md says how the Client keeps it).
const maxMethods = 15

// TestMethodsPerType keeps every type of the module's non-test Go code at
// maxMethods methods or fewer, exported or not, counted by receiver over
// the type's package directory.
func TestMethodsPerType(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	counts := map[string]int{}
	walkGo(t, root, fset, func(string) bool { return false }, func(rel string, f *ast.File) {
		for name, n := range methodCounts(f) {
			counts[path.Dir(rel)+"."+name] += n
		}
	})
	if len(counts) == 0 {
		t.Fatal("no methods found: the walk is broken")
	}
	for typ, n := range counts {
		if n > maxMethods {
			t.Errorf("%s declares %d methods, more than %d: give a second concept its own type", typ, n, maxMethods)
		}
	}
}

// methodCounts returns the methods f declares, by receiver type name.
func methodCounts(f *ast.File) map[string]int {
	counts := map[string]int{}
	for _, decl := range f.Decls {
		if fd, ok := decl.(*ast.FuncDecl); ok {
			if typ := receiver(fd); typ != "" {
				counts[typ]++
			}
		}
	}
	return counts
}

// receiver is the name of fd's receiver type, without a star or type
// parameters; "" for a function.
func receiver(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	typ := fd.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	switch g := typ.(type) { // a generic type's receiver: T[K] or T[K, V]
	case *ast.IndexExpr:
		typ = g.X
	case *ast.IndexListExpr:
		typ = g.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// walkGo parses every non-test Go file under root, leaving out hidden
// directories, testdata and the directories skip names (by their
// slash-separated path from root), and calls fn with each file and its
// path from root.
func walkGo(t *testing.T, root string, fset *token.FileSet, skip func(rel string) bool, fn func(rel string, f *ast.File)) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator)))
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" || skip(rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		fn(rel, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMethodCounts(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      map[string]int
	}{
		{"none", "func f() {}", map[string]int{}},
		{"value and pointer receivers", "type T struct{}\nfunc (T) a() {}\nfunc (*T) B() {}\nfunc (t *T) c() {}", map[string]int{"T": 3}},
		{"generic receivers", "type G[K any] struct{}\nfunc (g G[K]) a() {}\nfunc (g *G[K]) b() {}\ntype H[K, V any] struct{}\nfunc (h *H[K, V]) c() {}", map[string]int{"G": 2, "H": 1}},
		{"two types", "type A int\ntype B int\nfunc (A) x() {}\nfunc (B) x() {}\nfunc (B) y() {}", map[string]int{"A": 1, "B": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parser.ParseFile(token.NewFileSet(), "x.go", "package p\n"+tc.src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			got := methodCounts(f)
			if len(got) != len(tc.want) {
				t.Fatalf("methodCounts = %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("methodCounts = %v, want %v", got, tc.want)
				}
			}
		})
	}
}
