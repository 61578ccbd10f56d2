// Package builtin holds the tools a router serves in-process unless told not
// to: get_current_time and echo, the demo tools of a fresh install.
package builtin

import (
	"context"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// TimeIn is the input of get_current_time.
type TimeIn struct {
	Timezone string `json:"timezone,omitempty" jsonschema:"description=IANA time zone name such as UTC or Europe/Oslo; the server's zone when empty"`
}

// EchoIn is the input of echo.
type EchoIn struct {
	Text string `json:"text" jsonschema:"description=The text to send back"`
}

// Register adds the built-in tools to w.
func Register(w *worker.Worker) error {
	err := worker.Register(w, bus.ToolDef{Name: "get_current_time",
		Description: "Get the current date and time in a time zone.", ReadOnly: true, ConcurrencySafe: true, Idempotent: true, MaxAttempts: 2, TimeoutMS: 5000},
		func(_ context.Context, _ *worker.Call, in TimeIn) (string, error) {
			loc := time.Local
			if in.Timezone != "" {
				l, err := time.LoadLocation(in.Timezone)
				if err != nil {
					return "", fmt.Errorf("unknown time zone %q", in.Timezone)
				}
				loc = l
			}
			return time.Now().In(loc).Format(time.RFC3339), nil
		})
	if err != nil {
		return err
	}
	return worker.Register(w, bus.ToolDef{Name: "echo", Description: "Send the given text back unchanged.",
		ReadOnly: true, ConcurrencySafe: true, Idempotent: true, TimeoutMS: 5000},
		func(_ context.Context, _ *worker.Call, in EchoIn) (string, error) { return in.Text, nil })
}
