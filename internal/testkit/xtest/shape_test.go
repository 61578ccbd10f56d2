package xtest_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// surface names, with their types, every field and method that callers
// used on *Deployment before it was split into parts: it must keep
// compiling unchanged.
var _ = func(d *xtest.Deployment) {
	var (
		_ *server.Server                                                                 = d.Server
		_ *embedded.Cluster                                                              = d.Cluster
		_ []*router.Router                                                               = d.Routers
		_ []*nats.Conn                                                                   = d.RouterConns
		_ func() bus.Subjects                                                            = d.Subjects
		_ func() int                                                                     = d.Nodes
		_ func(int) string                                                               = d.URL
		_ func() int                                                                     = d.Replicas
		_ func(context.Context, string) (*nats.Conn, error)                              = d.Connect
		_ func(context.Context) (*router.Router, error)                                  = d.AddRouter
		_ func(context.Context, xtest.WorkerSpec) (*worker.Worker, error)                = d.AddWorker
		_ func(context.Context, func() (*nats.Msg, error), func(*bus.Event) error) error = d.EveryRouter
		_ func() (*nats.Msg, error)                                                      = d.StatusMsg
		_ func(context.Context, func(bus.Status) error) error                            = d.EveryStatus
		_ func(context.Context, ...string) error                                         = d.WaitLive
		_ func(context.Context, ...string) error                                         = d.WaitGone
		_ func()                                                                         = d.Close
	)
	_, _ = d.Bound(), d.Heartbeat()
}

// TestMethodsPerType: no type of the package declares more than 15
// methods (the team's rule), counting unexported ones.
func TestMethodsPerType(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	count := map[string]int{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv != nil {
				count[receiver(fn.Recv.List[0].Type)]++
			}
		}
	}
	if count["Deployment"] == 0 {
		t.Fatal("no methods of Deployment found: wrong directory?")
	}
	for typ, n := range count {
		t.Logf("%s: %d methods", typ, n)
		if n > 15 {
			t.Errorf("%s declares %d methods, more than 15", typ, n)
		}
	}
}

// receiver is the name of a receiver's type, without the star.
func receiver(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return "?"
}
