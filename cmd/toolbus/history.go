package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// maxHistory bounds the calls parked --history prints (the newest).
const maxHistory = 1000

// parkedHistory returns the call records of session ("" for all) that no
// longer wait — answered, done, expired, cancelled — newest last, read from
// the parked bucket (they stay there for its TTL, 7 days): who answered
// (answered_by, docs/protocol.md 6.1), when, and the result's state.
func parkedHistory(ctx context.Context, cl *client.Client, session string) ([]bus.ParkRecord, error) {
	js, err := jetstream.New(cl.Conn())
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, cl.Subjects().Bucket(bus.BucketParked))
	if err != nil {
		return nil, fmt.Errorf("parked --history: %w", err)
	}
	filter := "*.*.*"
	if session != "" {
		filter = session + ".*.*"
	}
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("parked --history: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []bus.ParkRecord
	for e := range w.Updates() {
		if e == nil {
			break // the current values are in
		}
		var r bus.ParkRecord
		if json.Unmarshal(e.Value(), &r) != nil || r.Status == bus.ParkParked {
			continue
		}
		out = append(out, r)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	slices.SortFunc(out, func(a, b bus.ParkRecord) int { return a.Created.Compare(b.Created) })
	if len(out) > maxHistory {
		out = out[len(out)-maxHistory:]
	}
	return out, nil
}

// renderHistory prints the records as a table.
func renderHistory(w io.Writer, recs []bus.ParkRecord) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tREPLY\tCALL\tTOOL\tKIND\tSTATUS\tRESULT\tANSWERED BY\tANSWERED AT")
	for _, r := range recs {
		res, by, at := "-", "-", "-"
		if r.Result != nil {
			res = r.Result.State
		}
		if r.AnsweredBy != "" {
			by = r.AnsweredBy
		}
		if !r.AnsweredAt.IsZero() {
			at = r.AnsweredAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Session, r.ReplyID, r.Call.ID, r.Call.Name, r.Kind, r.Status, res, by, at)
	}
	_ = tw.Flush()
}
