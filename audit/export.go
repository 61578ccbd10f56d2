package audit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// exportRetries bounds how often Export asks again while nothing comes: no
// server answered, or the replica it reads lags the leader (about 5 s in
// all, counted afresh after each record that comes).
const exportRetries = 10

// exportBatch is how many records one fetch asks for.
const exportBatch = 256

// Filter selects records for Export; zero fields select all.
type Filter struct {
	Since   time.Time
	Session string
	Tool    string
}

// Export calls fn with every stored record that f selects, oldest first,
// and returns once it has seen all that were stored when it started: all
// that the stream's leader held then. The records come through an ordered
// consumer, which on a cluster reads the replica it was placed on, and a
// replica may not have applied the newest records yet (a record is
// acknowledged once a majority holds it, and the reply follows that). So
// when the replica has no more, Export asks the leader whether it holds a
// selected record past the last one seen, and reads again until the
// replica delivers it.
func Export(ctx context.Context, js jetstream.JetStream, s bus.Subjects, f Filter, fn func(json.RawMessage) error) error {
	e, err := newExport(ctx, js, s, f)
	if err != nil {
		return err
	}
	return e.run(ctx, fn)
}

// export is one Export's reading.
type export struct {
	nc     *nats.Conn
	get    string // the leader's message-get subject
	cons   jetstream.Consumer
	filter string
	since  time.Time
	last   uint64 // the leader's last sequence when the export started
	seen   uint64 // the sequence of the last record read
}

func newExport(ctx context.Context, js jetstream.JetStream, s bus.Subjects, f Filter) (*export, error) {
	name := s.Stream(Stream)
	stream, err := leaderStream(ctx, js, name)
	if err != nil {
		return nil, err
	}
	session, tool := "*", "*"
	if f.Session != "" {
		session = f.Session
	}
	if f.Tool != "" {
		tool = f.Tool
	}
	e := &export{nc: js.Conn(), get: store.APIPrefix(js) + "STREAM.MSG.GET." + name,
		filter: s.Prefix + "." + kind + "." + session + "." + tool, since: f.Since, last: stream.CachedInfo().State.LastSeq}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{e.filter}}
	if !f.Since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &f.Since
	}
	if e.cons, err = stream.OrderedConsumer(ctx, cfg); err != nil {
		return nil, fmt.Errorf("audit: consumer: %w", err)
	}
	return e, nil
}

// leaderStream looks the stream up. While it elects a leader, a member
// answers with its own state, which may lack records a majority
// acknowledged: such an answer is asked again after a moment.
func leaderStream(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	for retries := 1; ; retries++ {
		stream, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("audit: stream %s: %w", name, err)
		}
		if c := stream.CachedInfo().Cluster; c == nil || c.Leader != "" {
			return stream, nil
		}
		if retries > exportRetries {
			return nil, fmt.Errorf("audit: stream %s has no leader", name)
		}
		if err := store.Pause(ctx, time.Duration(retries)*100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// run passes the selected records up to e.last to fn.
func (e *export) run(ctx context.Context, fn func(json.RawMessage) error) error {
	for retries := 0; e.seen < e.last; {
		n, err := e.fetch(ctx, fn)
		if n > 0 {
			if err != nil {
				return err
			}
			retries = 0
			if n == exportBatch {
				continue
			}
		}
		if err == nil {
			// The replica has no more now: has the leader?
			var more bool
			more, err = e.leaderHas(ctx)
			switch {
			case err == nil && !more:
				return nil
			case err == nil && n > 0:
				continue // read again at once
			}
		}
		// Nothing came though the leader has more, or no server
		// answered: the replica lags the leader, or the consumer's server
		// or the leader is not answering yet (a cluster under load, a
		// leader moving). Ask again after a moment.
		if err != nil && !store.IsTransient(err) {
			return err
		}
		if retries++; retries > exportRetries {
			return cmp.Or(err, fmt.Errorf("audit: the leader holds records up to sequence %d that were not delivered", e.last))
		}
		if err := store.Pause(ctx, time.Duration(retries)*100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// fetch passes the replica's next records (those up to e.last) to fn and
// returns how many it read.
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

// leaderHas asks the stream's leader whether it holds a selected record
// past the last one read, up to e.last.
func (e *export) leaderHas(ctx context.Context) (bool, error) {
	req := struct {
		Seq       uint64     `json:"seq,omitempty"`
		NextFor   string     `json:"next_by_subj"`
		StartTime *time.Time `json:"start_time,omitempty"`
	}{Seq: e.seen + 1, NextFor: e.filter}
	if e.seen == 0 && !e.since.IsZero() {
		req.Seq, req.StartTime = 0, &e.since
	}
	b, err := json.Marshal(req)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := e.nc.RequestWithContext(ctx, e.get, b)
	if err != nil {
		return false, fmt.Errorf("audit: leader: %w", err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Sequence uint64 `json:"seq"`
		} `json:"message"`
	}
	switch err := json.Unmarshal(m.Data, &resp); {
	case err != nil:
		return false, fmt.Errorf("audit: leader: %w", err)
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return false, nil
	case resp.Error != nil:
		return false, fmt.Errorf("audit: leader: %w", resp.Error)
	case resp.Message == nil:
		return false, errors.New("audit: leader: empty reply")
	}
	return resp.Message.Sequence <= e.last, nil
}
