package life_test

import (
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rootContexts are the library functions that may make a context from
// context.Background or context.TODO, keyed "<file> <func>", with why.
// Everywhere else a context comes from the caller, from a component's life
// (its Context, Background or Landing), or from context.WithoutCancel of
// the caller's, with a bound, for a cleanup that must outlive a cancelled
// request (docs/router.md "Lifecycle").
var rootContexts = map[string]string{
	"internal/life/life.go New":         "the root of every component's lifetime: its base and landing contexts",
	"internal/life/life.go Landing":     "past the cleanup window: a context already cut, with ErrStopped",
	"internal/life/life.go drain":       "the cleanup window's wait, once the drain's own context has ended",
	"internal/cli/cli.go Main":          "the commands' shared main: the signal context every run gets",
	"builtin/interp_linux.go interpret": "the sandbox process's main (toolbus-sandbox), after the re-exec",
	"bench/process.go runChild":         "a bench child process's main: its signal context",
}

// resources are the exported Stop/Close/Drain methods without a context:
// each releases a resource (io.Closer and its kin) and stops no goroutine.
var resources = map[string]string{
	"bus/offload/read.go Object.Close":             "io.ReadCloser of a stored output",
	"skills/materialize.go Materializer.Close":     "removes the materialized directory",
	"mcp/bridge/bounds.go limitedBody.Close":       "an HTTP response body (io.ReadCloser)",
	"mcp/bridge/transport.go stdioTransport.Close": "mcp-go's transport.Interface: ends the server process's pipes",
}

// TestLifecycleShape keeps one lifecycle shape in library code: background
// work stops with Stop(ctx) error, Drain(ctx) or Close(ctx), and no
// context is made from context.Background outside mains and the roots
// above. Mains (cmd/, package main) and the test kit are not library code.
func TestLifecycleShape(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	seen := map[string]bool{}
	notLibrary := func(rel string) bool {
		return rel == "cmd" || rel == "internal/testkit" || rel == "python" || rel == "java" || rel == "examples"
	}
	walkGo(t, root, fset, notLibrary, func(rel string, f *ast.File) {
		if f.Name.Name == "main" {
			return
		}
		ctxName := importName(f, "context")
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			if name := stopper(fd); name != "" {
				key := rel + " " + name
				seen[key] = true
				if _, ok := resources[key]; !ok {
					t.Errorf("%s: %s takes no context: background work stops with Stop(ctx) error, Drain(ctx) or Close(ctx) (or list it in resources, with why, if it only releases a resource)",
						fset.Position(fd.Pos()), name)
				}
			}
			if ctxName == "" {
				continue
			}
			key := rel + " " + fd.Name.Name
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Background" && sel.Sel.Name != "TODO") {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); !ok || x.Name != ctxName {
					return true
				}
				seen[key] = true
				if _, ok := rootContexts[key]; !ok {
					t.Errorf("%s: context.%s() in %s: take the caller's context, the component's life, or context.WithoutCancel(ctx) with a bound (or list it in rootContexts, with why)",
						fset.Position(call.Pos()), sel.Sel.Name, fd.Name.Name)
				}
				return true
			})
		}
	})
	for _, list := range []map[string]string{rootContexts, resources} {
		for key := range list {
			if !seen[key] {
				t.Errorf("%s is listed but not found: remove it from the list", key)
			}
		}
	}
}

// stopper returns "Type.Method" when fd is an exported Stop, Close, Drain
// or Shutdown method whose first parameter is not a context.
func stopper(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	switch fd.Name.Name {
	case "Stop", "Close", "Drain", "Shutdown":
	default:
		return ""
	}
	if ps := fd.Type.Params.List; len(ps) > 0 {
		if sel, ok := ps[0].Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Context" {
			return ""
		}
	}
	typ := receiver(fd)
	if typ == "" {
		return ""
	}
	return typ + "." + fd.Name.Name
}

// importName is the name f imports path as; "" when it does not.
func importName(f *ast.File, path string) string {
	for _, im := range f.Imports {
		if strings.Trim(im.Path.Value, `"`) != path {
			continue
		}
		if im.Name != nil {
			return im.Name.Name
		}
		return filepath.Base(path)
	}
	return ""
}

// moduleRoot is the directory of the go.mod above the test's.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}
