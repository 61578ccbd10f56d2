package router

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
)

// Progress reaches the session through the router (docs/protocol.md 5.3,
// 1.18): a worker sends a call's io.toolbus.call.progress to the exec's
// reply subject + bus.ProgressSuffix, the exec's wait hands it here
// (internal/replies, Options.Progress: a subscription and goroutine of its
// own, 1.19), and the router publishes it on P.events.<session> under the
// ids of the exec it sent: a worker, which may not publish there, reports
// progress of the calls it was sent only.

// A call's progress is bounded: events of at most bus.MaxProgress bytes,
// a burst of progressBurst, then one every progressEvery (the bridge's
// pace, mcp/bridge); the rest is dropped before it is decoded.
const (
	progressBurst = 8
	progressEvery = 250 * time.Millisecond
)

// progressGate is one exec attempt's progress so far, reset before each
// attempt; only the progress goroutine touches it while the attempt's wait
// is registered, and the wait's Done waits for that (internal/replies).
type progressGate struct {
	seq    int       // the last seq published
	tokens int       // events allowed now
	at     time.Time // when tokens were last counted; zero: none yet
}

// admit takes a token at now, reporting false when none is left.
func (g *progressGate) admit(now time.Time) bool {
	if g.at.IsZero() {
		g.tokens, g.at = progressBurst, now
	}
	if n := now.Sub(g.at) / progressEvery; n > 0 {
		g.tokens = min(progressBurst, g.tokens+int(n))
		g.at = g.at.Add(n * progressEvery)
	}
	if g.tokens == 0 {
		return false
	}
	g.tokens--
	return true
}

// progressRelay publishes the progress workers send on exec inboxes.
type progressRelay struct {
	*wire
	now func() time.Time // time.Now; a test's clock
}

// relay is replies.Options.Progress: m came on the progress subject of
// the exec of tag, a *job whose request is awaited.
func (x *progressRelay) relay(tag any, m *nats.Msg) {
	j, ok := tag.(*job)
	if !ok || len(m.Data) > bus.MaxProgress || !j.progress.admit(x.now()) {
		x.dropped(1)
		return
	}
	ref := callRef{j.session, j.replyID, j.call.ID}
	data, err := progressData(m, ref, j.progress.seq, x.subj.ObjectStore(bus.ObjectOutputs))
	if err != nil {
		x.dropped(1)
		x.log.Debug("router: progress dropped", "call", ref.key(), "err", err)
		return
	}
	j.progress.seq = data.Seq
	e := bus.Head(bus.TypeCallProgress, x.source)
	if e.Data, err = data.AppendJSON(nil); err == nil {
		e.Subject, e.SessionID, e.ReplyID, e.ToolCallID = j.call.ID, j.session, j.replyID, j.call.ID
		e.TraceParent, e.TraceState = j.trace[0], j.trace[1]
		err = bus.SendTrusted(x.subj.EventsMsg(j.session), &e, "", x.nc.PublishMsg)
	}
	if err != nil { // counted dropped too: every progress message ends published or dropped
		x.dropped(1)
		x.log.Warn("router: progress not published", "call", ref.key(), "err", err)
	}
}

// dropped counts n progress events dropped: over the size or the pace, not
// valid, not published, or (replies.Options.ProgressDropped) past the
// pending limits or with no call awaiting it.
func (x *progressRelay) dropped(n int) {
	if x.m != nil {
		x.m.Rejected.WithLabelValues("progress_dropped").Add(float64(n))
	}
}

// progressData is the data of the progress event m sent for call ref,
// checked: its type, no other call named, a seq past last, valid blocks,
// stored outputs only the call's own objects of bucket.
func progressData(m *nats.Msg, ref callRef, last int, bucket string) (bus.Progress, error) {
	var p bus.Progress
	var e bus.Event
	if err := bus.DecodeTo(m, &e); err != nil {
		return p, err
	}
	if e.Type != bus.TypeCallProgress {
		return p, fmt.Errorf("a %s on a progress subject", e.Type)
	}
	if ref.namedOtherBy(&e) {
		return p, fmt.Errorf("it names another call: sessionid %q, replyid %q, toolcallid %q", e.SessionID, e.ReplyID, e.ToolCallID)
	}
	if err := e.DataAs(&p); err != nil {
		return p, err
	}
	if p.Seq <= last {
		return p, fmt.Errorf("seq %d after %d", p.Seq, last)
	}
	for i, bl := range p.Output {
		err := checkBlock(bl)
		if err == nil && hasStored(p.Output[i:i+1]) {
			_, err = offload.Owned(bucket, ref.key(), bl.URL) // the call's own, as a result's (5.9); nothing read
		}
		if err != nil {
			return p, fmt.Errorf("output block %d: %w", i, err)
		}
	}
	if p.Output == nil {
		p.Output = []bus.Block{}
	}
	return p, nil
}
