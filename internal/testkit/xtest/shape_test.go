package xtest_test

import (
	"context"

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
	_ = d.Heartbeat()
}
