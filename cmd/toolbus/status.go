package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/bus"
)

// instance is one router or worker found by NATS micro discovery.
type instance struct {
	Kind  string            `json:"kind"`
	ID    string            `json:"id"`
	Meta  map[string]string `json:"metadata"`
	Tools []string          `json:"tools,omitempty"`
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("status", stderr)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	wait := fs.Duration("wait", 300*time.Millisecond, "how long to collect discovery answers from routers and workers")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	cl, closeConn, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	var st bus.Status
	if err := cl.Admin(ctx, "status", "", nil, &st); err != nil {
		return fmt.Errorf("admin status: %w", err)
	}
	var found []instance
	for _, kind := range []string{"toolbus-router", "toolbus-worker"} {
		infos, err := discover(ctx, cl.Conn(), kind, *wait)
		if err != nil {
			return err
		}
		for _, in := range infos {
			if in.Metadata["prefix"] != "" && in.Metadata["prefix"] != cn.prefix {
				continue
			}
			it := instance{Kind: kind[len("toolbus-"):], ID: in.ID, Meta: in.Metadata}
			if id := in.Metadata[it.Kind]; id != "" {
				it.ID = id // the instance id toolbus uses, not micro's own
			}
			for _, ep := range in.Endpoints {
				it.Tools = append(it.Tools, ep.Name)
			}
			found = append(found, it)
		}
	}
	slices.SortFunc(found, func(a, b instance) int {
		if a.Kind != b.Kind {
			return strings.Compare(a.Kind, b.Kind)
		}
		return strings.Compare(a.ID, b.ID)
	})
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{"status": st, "instances": found})
	}
	sessions := fmt.Sprintf("%d in this router's cache", st.Sessions)
	if st.SessionsStored != nil {
		sessions = fmt.Sprintf("%d stored (%d in this router's cache)", *st.SessionsStored, st.Sessions)
	}
	fmt.Fprintf(stdout, "sessions: %s   parked calls: %d   groups: %d   (answered by router %s)\n", sessions, st.Parked, st.Groups, st.Router)
	fmt.Fprintln(stdout, storeLine(st.Store))
	for _, w := range st.Warnings {
		fmt.Fprintln(stdout, "warning:", w)
	}
	// Columns sized to their longest cell: long bridged MCP names
	// (mcp__server__tool) no longer push the others out of line.
	tw := tabwriter.NewWriter(stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "tools:")
	for _, t := range st.Tools {
		live := fmt.Sprintf("%d live workers", t.LiveWorkers)
		if t.External {
			live = "external"
		}
		fmt.Fprintf(tw, "  %s\t%s\tgroups: %s\n", t.Name, live, strings.Join(t.Groups, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(tw, "instances:")
	for _, it := range found {
		fmt.Fprintf(tw, "  %s\t%s\t%v\n", it.Kind, it.ID, it.Tools)
	}
	return tw.Flush()
}

// storeLine is the status line of the store's health: "store: ok", or
// "store: full (JetStream: insufficient resources) since 10:41:34Z".
func storeLine(s bus.StoreStatus) string {
	switch {
	case s.State == "":
		return "store: unknown (the router does not report it)"
	case s.State == "ok":
		return "store: ok"
	}
	line := fmt.Sprintf("store: %s (JetStream: %s)", s.State, s.Error)
	if s.Since != nil {
		line += " since " + s.Since.UTC().Format(time.RFC3339)
	}
	return line
}

// discover collects the micro INFO answers of every instance of service
// name that answers within wait.
func discover(ctx context.Context, nc *nats.Conn, name string, wait time.Duration) ([]micro.Info, error) {
	subject, err := micro.ControlSubject(micro.InfoVerb, name, "")
	if err != nil {
		return nil, err
	}
	inbox := nc.NewInbox() // with the connection's inbox prefix, which a secured role must use
	ch := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var out []micro.Info
	for {
		select {
		case <-ctx.Done():
			return out, nil
		case <-timer.C:
			return out, nil
		case m := <-ch:
			var in micro.Info
			if json.Unmarshal(m.Data, &in) == nil {
				out = append(out, in)
			}
		}
	}
}
