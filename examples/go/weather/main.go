// Command weather is a tool worker in Go, the README's "Write a tool" as a
// program: it serves get_weather on the bus that $NATS_URL names (default
// nats://127.0.0.1:4222) until SIGINT or SIGTERM, then drains.
//
//	go run ./cmd/router                                     # in one terminal
//	go run ./examples/go/weather                            # in another
//	go run ./cmd/toolbus call get_weather '{"city":"Oslo"}'  # prints "get_weather: success", then 4°C, rain in Oslo
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/worker"
)

// WeatherIn is the input of get_weather: the router validates a call's input
// against the JSON schema derived from it before the function runs.
type WeatherIn struct {
	City string `json:"city" jsonschema:"description=City name"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "weather:", err)
		os.Exit(1)
	}
}

// run serves get_weather until ctx ends. From its Dial to its Start it is
// the README's "Write a tool" (TestReadmeIsTheExample keeps them one).
func run(ctx context.Context, stdout io.Writer) error {
	w, err := worker.Dial(natsconn.FromEnv(), worker.Config{}) // $NATS_URL, and credentials and TLS as the nats CLI reads them
	if err != nil {
		return err
	}
	defer w.Stop(context.WithoutCancel(ctx)) // drains (calls in flight finish, for up to worker.StopTimeout), then closes the connection

	err = worker.Register(w, bus.ToolDef{Name: "get_weather", Description: "Current weather.", ReadOnly: true},
		func(ctx context.Context, c *worker.Call, in WeatherIn) (string, error) {
			if err := c.Progress(bus.Block{Type: "text", Text: "asking the weather service"}); err != nil {
				return "", err // the call was cancelled or the connection is gone
			}
			return "4°C, rain in " + in.City, nil
		})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}

	select {
	case <-w.Registered(): // a router accepted get_weather: calls come now
		fmt.Fprintf(stdout, "weather: worker %s serving get_weather\n", w.ID())
	case <-ctx.Done():
		return nil
	}
	<-ctx.Done()
	return nil
}
