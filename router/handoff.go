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
		r.reject(m, bus.Errorf(bus.CodeBadEvent, "subject %q is not %s or %s", m.Subject, r.subj.Handoffs.Follow("{external,confirm}", ""), r.subj.Handoffs.Follow("{external,confirm}", "<tool>")))
		return
	}
	what := r.subj.Handoffs.Follow(want.Kind, want.Tool)
	bucket := strings.TrimPrefix(r.parked.CachedInfo().Config.Name, "KV_")
	r.serve(m, e, feed{stream: r.parked, filter: "$KV." + bucket + ".*.*.*", key: "handoff " + what, kind: "handoff",
		create: bus.TypeHandoffFollow, ready: bus.TypeHandoffReady, what: what, max: maxReplays, want: &want})
}

// handoffWant is what P.handoff.<kind>[.<tool>] grants: the parked
// records of kind, of tool or of every tool.
func (r *replays) handoffWant(subject string) (parked.Want, bool) {
	rest, ok := strings.CutPrefix(subject, r.subj.Handoffs.Follow("", "")) // "P.handoff."
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
// with header Nats-Sequence, the record's stream sequence), as JetStream
// would send the pull's messages: up to the pull's batch, then, when fewer
// came, a closing status in a Status header: 404 (no wait asked: nothing
// more now), 408 (the wait ended) or 409 (the consumer is gone).
func (r *replays) relayHandoff(m *nats.Msg, c jetstream.Consumer, q bus.ConsumerNext, want parked.Want) {
	select {
	case r.pulls <- struct{}{}:
	default:
		r.reject(m, bus.Errorf(bus.CodeLimitExceeded, "this router relays %d handoff pulls at once; pull again", maxHandoffPulls))
		return
	}
	relay := func(ctx context.Context) {
		defer func() { <-r.pulls }()
		if status := r.fetchHandoff(ctx, m.Reply, c, q, want); status != "" {
			_ = r.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{"Status": {status}}})
		}
	}
	if !r.work(relay) { // the router drains: the follower asks another
		<-r.pulls
		_ = r.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{"Status": {"409"}}})
	}
}

// minHandoffWait is the shortest wait a fetch of the relay is made with:
// less is the end of the pull's wait. handoffSlice is the longest: a pull
// waits in fetches of at most this long, so a router's drain ends a
// waiting relay within it.
const (
	minHandoffWait = 10 * time.Millisecond
	handoffSlice   = time.Second
)

// fetchHandoff relays the requests of one pull: it fetches the records
// until as many requests as the pull's batch went out ("" returned), the
// consumer has nothing more (no wait: 404), the wait ended (408) or the
// consumer is lost (409). Records want does not grant are read and
// skipped, so one pull may fetch many times.
func (r *replays) fetchHandoff(ctx context.Context, reply string, c jetstream.Consumer, q bus.ConsumerNext, want parked.Want) string {
	deadline := time.Now().Add(time.Duration(q.ExpiresMS) * time.Millisecond)
	for sent := 0; sent < q.Batch; {
		if ctx.Err() != nil {
			return "409" // drained: the follower asks another router
		}
		ask := q.Batch - sent
		var (
			batch jetstream.MessageBatch
			err   error
		)
		if q.ExpiresMS == 0 {
			batch, err = c.FetchNoWait(ask)
		} else {
			left := time.Until(deadline)
			if left < minHandoffWait {
				return "408"
			}
			batch, err = c.Fetch(ask, jetstream.FetchMaxWait(min(left, handoffSlice)))
		}
		if err != nil {
			return "409"
		}
		got, lost := 0, false
		for msg := range batch.Messages() {
			got++
			if ctx.Err() != nil || lost {
				continue // drained: the fetch ends on its own
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
				lost = true
			}
			sent++
		}
		switch err := batch.Error(); {
		case ctx.Err() != nil || lost || err != nil && !errors.Is(err, nats.ErrTimeout):
			return "409"
		case got < ask && q.ExpiresMS == 0:
			return "404"
		} // fewer than asked with a wait: the next fetch waits for what is left of it

	}
	return ""
}
