// Package worker is the runtime that serves tools on the bus: typed tools
// whose schema is derived from their input type, raw JSON tools for bridged
// sources, per-tool queue groups so copies share the load, a concurrency
// limit, progress events, cancellation through the context, heartbeats that
// keep the tools listed, and a drain on shutdown.
//
//	w, _ := worker.New(nc, worker.Config{})
//	worker.Register(w, bus.ToolDef{Name: "echo", Description: "Echo the text."},
//		func(ctx context.Context, c *worker.Call, in EchoIn) (string, error) { return in.Text, nil })
//	_ = w.Start(ctx)
//	defer w.Stop() // or w.Drain(ctx) with your own deadline
package worker
