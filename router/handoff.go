package router

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/parked"
)

// maxHandoffPulls bounds the handoff pulls one router relays at once: each
// holds a goroutine and a fetch for up to the pull's wait.
const maxHandoffPulls = 1024

// onHandoff serves the handoff (docs/protocol.md 6.2): a handler or
// approver follows, on P.handoff.<kind>[.<tool>], the parked records of
// that kind and tool. The record is the request: the consumer the router
// makes reads every call record of P_parked's stream, and the router
// reads each pull itself and relays, as the request event, only the
// records the subject grants (relayHandoff).
func (r *replays) onHandoff(m *nats.Msg) {
	e, err := bus.Decode(m)
	if err != nil {
		r.reject(m, err)
		return
	}
	want, ok := r.handoffWant(m.Subject)
	if !ok || r.parked == nil {
		r.reject(m, bus.Errorf(bus.CodeBadEvent, "subject %q is not %s or %s", m.Subject, r.subj.Handoff("{external,confirm}", ""), r.subj.Handoff("{external,confirm}", "<tool>")))
		return
	}
	what := r.subj.Handoff(want.Kind, want.Tool)
	bucket := strings.TrimPrefix(r.parked.CachedInfo().Config.Name, "KV_")
	r.serve(m, e, feed{stream: r.parked, filter: "$KV." + bucket + ".*.*.*", key: "handoff " + what, kind: "handoff",
		create: bus.TypeHandoffFollow, ready: bus.TypeHandoffReady, what: what, max: maxReplays, want: &want})
}

// handoffWant is what P.handoff.<kind>[.<tool>] grants: the parked
// records of kind, of tool or of every tool.
func (r *replays) handoffWant(subject string) (parked.Want, bool) {
	rest, ok := strings.CutPrefix(subject, r.subj.Handoff("", "")) // "P.handoff."
	if !ok {
		return parked.Want{}, false
	}
	kind, tool, hasTool := strings.Cut(rest, ".")
	if hasTool && !bus.ValidName(tool) || kind != bus.KindExternal && kind != bus.KindConfirm {
		return parked.Want{}, false
	}
	return parked.Want{Kind: kind, Tool: tool}, true
}

// relayHandoff reads one pull of consumer c for the asker and sends it,
// on m's reply subject, the request of every record want grants (each
// with header Nats-Sequence, the record's stream sequence), then a closing status as JetStream's own: a message
// with header Status 404 (no wait asked: nothing more now), 408 (the wait
// ended) or 409 (the consumer is gone).
func (r *replays) relayHandoff(m *nats.Msg, c jetstream.Consumer, q bus.ConsumerNext, want parked.Want) {
	select {
	case r.pulls <- struct{}{}:
	default:
		r.reject(m, bus.Errorf(bus.CodeLimitExceeded, "this router relays %d handoff pulls at once; pull again", maxHandoffPulls))
		return
	}
	go func() {
		defer func() { <-r.pulls }()
		status := r.fetchHandoff(r.base, m.Reply, c, q, want)
		_ = r.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{"Status": {status}}})
	}()
}

// fetchHandoff relays the records of one pull and returns its closing
// status.
func (r *replays) fetchHandoff(ctx context.Context, reply string, c jetstream.Consumer, q bus.ConsumerNext, want parked.Want) string {
	var (
		batch jetstream.MessageBatch
		err   error
		end   = "408"
	)
	if q.ExpiresMS == 0 {
		end = "404"
		batch, err = c.FetchNoWait(q.Batch)
	} else {
		batch, err = c.Fetch(q.Batch, jetstream.FetchMaxWait(time.Duration(q.ExpiresMS)*time.Millisecond))
	}
	if err != nil {
		return "409"
	}
	for {
		select {
		case <-ctx.Done():
			return "409"
		case msg, ok := <-batch.Messages():
			if !ok {
				if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
					return "409"
				}
				return end
			}
			out, ok := parked.Request(msg.Data(), want, r.subj, r.source)
			if !ok {
				continue
			}
			if md, err := msg.Metadata(); err == nil {
				out.Header.Set(jetstream.SequenceHeader, strconv.FormatUint(md.Sequence.Stream, 10))
			}
			out.Subject = reply
			if err := r.nc.PublishMsg(out); err != nil {
				return "409"
			}
		}
	}
}
