package audit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// exportRetries bounds Export's retries while nothing comes (about 5 s).
const exportRetries = 10

// exportBatch is how many records one fetch asks for.
const exportBatch = 256

// Filter selects records for Export; zero fields select all.
type Filter struct {
	Since   time.Time
	Session string
	Tool    string
}

// Export calls fn with every record f selects, oldest first, up to the leader's last
// when it started: it reads on past a lagging replica until that one comes.
func Export(ctx context.Context, js jetstream.JetStream, s bus.Subjects, f Filter, fn func(json.RawMessage) error) error {
	name := s.Stream(Stream)
	stream, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("audit: stream %s: %w", name, err)
	}
	filter := s.Prefix + "." + kind + "." + cmp.Or(f.Session, "*") + "." + cmp.Or(f.Tool, "*")
	last, at, err := leaderLast(ctx, stream, filter)
	if err != nil || last == 0 || at.Before(f.Since) {
		return err // an error, or no selected record
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}}
	if !f.Since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &f.Since
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("audit: consumer: %w", err)
	}
	return (&export{cons: cons, last: last}).run(ctx, fn)
}

// export is one Export's reading.
type export struct {
	cons jetstream.Consumer
	last uint64 // the leader's last selected record when the export started
	seen uint64 // the sequence of the last record read
}

// leaderLast asks the stream's leader for its last record on filter (0: none).
func leaderLast(ctx context.Context, stream jetstream.Stream, filter string) (uint64, time.Time, error) {
	for retries := 1; ; retries++ {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := stream.GetLastMsgForSubject(actx, filter)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return 0, time.Time{}, nil
		case err == nil:
			return m.Sequence, m.Time, nil
		}
		if !store.IsTransient(err) || retries > exportRetries || ctx.Err() != nil {
			return 0, time.Time{}, fmt.Errorf("audit: the last record from the leader: %w", err)
		}
		if err := bus.Sleep(ctx, time.Duration(retries)*100*time.Millisecond); err != nil {
			return 0, time.Time{}, err
		}
	}
}

// run passes the selected records up to e.last to fn.
func (e *export) run(ctx context.Context, fn func(json.RawMessage) error) error {
	for retries := 0; e.seen < e.last; {
		n, err := e.fetch(ctx, fn)
		switch {
		case n > 0 && err != nil:
			return err
		case n > 0:
			retries = 0
			continue
		case err != nil && !store.IsTransient(err):
			return err
		}
		// Nothing came: a lagging replica or a busy server. Ask again.
		if retries++; retries > exportRetries {
			return cmp.Or(err, fmt.Errorf("audit: records up to sequence %d not delivered", e.last))
		}
		if err := bus.Sleep(ctx, time.Duration(retries)*100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// fetch passes the replica's next records up to e.last to fn, and counts them.
func (e *export) fetch(ctx context.Context, fn func(json.RawMessage) error) (int, error) {
	batch, err := e.cons.FetchNoWait(exportBatch)
	if err != nil {
		return 0, fmt.Errorf("audit: fetch: %w", err)
	}
	n := 0
	for m := range batch.Messages() {
		n++
		meta, err := m.Metadata()
		if err != nil {
			return n, fmt.Errorf("audit: fetch: %w", err)
		}
		if meta.Sequence.Stream > e.last {
			e.seen = e.last // stored after the export started: all before it came
			return n, nil
		}
		e.seen = meta.Sequence.Stream
		if err := fn(m.Data()); err != nil {
			return n, err
		}
	}
	if err := batch.Error(); err != nil {
		return n, fmt.Errorf("audit: fetch: %w", err)
	}
	return n, ctx.Err()
}
