package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// Output reads the progress a task's call published so far from the
// session's events (stream, subject P.events.<session>), from the task's
// start: its blocks in order, the last at most maxBytes of them (truncated
// says older ones were left out). It reads what is stored when it is
// called and returns; ctx bounds the read.
func Output(ctx context.Context, js jetstream.JetStream, stream, subject string, rec *Record, maxBytes int) (out []bus.Block, truncated bool, err error) {
	start := rec.Started.Add(-time.Second)
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject},
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start})
	if err != nil {
		return nil, false, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, false, err
	}
	pending := info.NumPending
	var size int
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return out, truncated, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			pending--
			blocks := progressOf(m, rec)
			for _, b := range blocks {
				out = append(out, b)
				size += len(b.Text) + len(b.Data) + len(b.URL)
			}
			for size > maxBytes && len(out) > 1 {
				size -= len(out[0].Text) + len(out[0].Data) + len(out[0].URL)
				out, truncated = out[1:], true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return out, truncated, err
		}
		if got == 0 || ctx.Err() != nil {
			break
		}
	}
	return out, truncated, nil
}

// progressOf is the blocks of m when it is a progress event of rec's call.
func progressOf(m jetstream.Msg, rec *Record) []bus.Block {
	e, err := bus.Decode(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
	if err != nil || e.Type != bus.TypeCallProgress || e.ReplyID != rec.ReplyID || e.ToolCallID != rec.CallID {
		return nil
	}
	var p bus.Progress
	if json.Unmarshal(e.Data, &p) != nil {
		return nil
	}
	return p.Output
}
