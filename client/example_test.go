package client_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

type greetIn struct {
	Name string `json:"name" jsonschema:"description=Who to greet"`
}

// A whole deployment in one process: an embedded nats-server, a router, a
// worker serving one typed tool, and an agent calling it.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, _ := os.MkdirTemp("", "toolbus-example")
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{StoreDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()
	nc, _ := nats.Connect(srv.ClientURL())
	defer nc.Close()

	r, _ := router.New(nc, router.Config{})
	if err := r.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer r.Stop(ctx)

	w, _ := worker.New(nc, worker.Config{})
	_ = worker.Register(w, bus.ToolDef{Name: "greet", Description: "Greet someone.", ReadOnly: true},
		func(_ context.Context, _ *worker.Call, in greetIn) (string, error) {
			return "Hello, " + in.Name + "!", nil
		})
	if err := w.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = w.Drain(ctx) }()
	<-w.Registered()

	agent := client.New(nc, client.Config{Source: "example/agent"})
	reply, err := agent.Call(ctx, "session-1", bus.Batch{Calls: []bus.Call{
		{ID: "call_1", Name: "greet", Input: client.Input(map[string]string{"name": "Ada"})},
		{ID: "call_2", Name: "greet", Input: client.Input(map[string]int{"name": 7})},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, res := range reply.Results {
		fmt.Printf("%s %s: %s\n", res.ID, res.State, res.Output[0].Text)
	}
	// Output:
	// call_1 success: Hello, Ada!
	// call_2 error: Input validation failed for tool 'greet':
	// /name: expected string, but got number
}
