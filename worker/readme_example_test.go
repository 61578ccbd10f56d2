package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// Example_externalTool is the README's external tool from Go: its
// definition is registered with one io.toolbus.register request on the
// tool's own subject, P.register.<tool> (no worker runs it), and a person
// or system answers each parked call.
func Example_externalTool() {
	register := func(ctx context.Context, nc *nats.Conn) error {
		def := bus.ToolDef{Name: "approve_po", Description: "A person approves a purchase order.", External: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"po":{"type":"string"}}}`)} // required: nothing derives it
		e, err := bus.NewEvent(bus.TypeRegister, "my-app", bus.Register{Worker: "my-app", Tools: []bus.ToolDef{def}})
		if err != nil {
			return err
		}
		m, err := e.Msg(client.New(nc, client.Config{}).Subjects().Workers.Register(def.Name))
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			return err
		}
		ack, err := bus.Decode(resp)
		if err != nil {
			return err
		}
		if ack.Type != bus.TypeRegisterAck {
			return fmt.Errorf("register refused: %s", ack.Data)
		}
		return nil
	}
	answer := func(ctx context.Context, cl *client.Client, session, replyID, callID string) error {
		err := cl.Parked().Answer(ctx, "approve_po", session, replyID, callID, bus.Answer{State: bus.StateSuccess, Output: bus.Text("approved")})
		if errors.Is(err, bus.ErrNotParked) {
			return nil // answered already, or cancelled
		}
		return err
	}
	_, _ = register, answer
}
