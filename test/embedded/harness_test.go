package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// env is one deployment on a real in-process nats-server.
type env struct {
	t       *testing.T
	srv     *server.Server
	routers []*router.Router
	client  *client.Client
	nc      *nats.Conn
}

const testHeartbeat = 500 * time.Millisecond

func newEnv(t *testing.T, routers int) *env {
	t.Helper()
	s := bustest.RunServer(t)
	e := &env{t: t, srv: s}
	for range routers {
		e.addRouter()
	}
	e.nc = bustest.Connect(t, s)
	e.client = client.New(e.nc, client.Config{Source: "test/agent"})
	return e
}

func (e *env) addRouter() *router.Router {
	e.t.Helper()
	nc := bustest.Connect(e.t, e.srv)
	r, err := router.New(nc, router.Config{Store: bus.StoreConfig{Heartbeat: testHeartbeat}})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := r.Start(e.t.Context()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(r.Stop)
	e.routers = append(e.routers, r)
	return r
}

// addWorker starts a worker after setup has added its tools, and waits until
// every router sees all of them live.
func (e *env) addWorker(setup func(w *worker.Worker)) *worker.Worker {
	e.t.Helper()
	nc := bustest.Connect(e.t, e.srv)
	w, err := worker.New(nc, worker.Config{Heartbeat: testHeartbeat})
	if err != nil {
		e.t.Fatal(err)
	}
	setup(w)
	if err := w.Start(e.t.Context()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	select {
	case <-w.Registered():
	case <-time.After(10 * time.Second):
		e.t.Fatal("worker not registered")
	}
	return w
}

// waitLive polls until every router sees the named tools live.
func (e *env) waitLive(names ...string) {
	e.t.Helper()
	bustest.CheckFor(e.t, 10*time.Second, 5*time.Millisecond, func() error {
		for _, r := range e.routers {
			for _, n := range names {
				t, ok := r.Registry().Lookup(n)
				if !ok || !r.Registry().Live(t) {
					return &bus.Error{Code: "not_live", Message: n}
				}
			}
		}
		return nil
	})
}
