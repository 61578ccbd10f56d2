package bench

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// BenchmarkClusterR3 measures calls/s on a 3-node cluster in this process
// with every bucket and stream replicated three times (issue 27: where one
// stream saturates): read-only, write (the dedupe ledger) and parked calls
// (park → answer → batch.done) through one router, next to what one R3
// stream and one R3 KV bucket take on their own — a synchronous publish
// with a message id per caller (as the router stores batch.done), the same
// pipelined (PublishAsync, the stream's ceiling), and a create then a
// compare-and-set per key (a parked record and its answer). Each figure is
// one window of clusterWindow at clusterCallers callers; run it with
//
//	go test ./bench -run '^$' -bench ClusterR3 -benchtime 1x -timeout 10m
//
// b.N repeats the windows; the metrics are the last repetition's.
func BenchmarkClusterR3(b *testing.B) {
	ctx := b.Context()
	d, err := deploy(ctx, clusterCallers, true, func(string, ...any) {})
	if err != nil {
		b.Fatal(err)
	}
	defer d.close()
	js, err := jetstream.New(d.clientNC)
	if err != nil {
		b.Fatal(err)
	}
	stream := bus.NewSubjects("").Stream(bus.StreamEvents)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "clbench", Replicas: 3, History: 1})
	if err != nil {
		b.Fatal(err)
	}
	parked, err := newParkedCallers(ctx, d, clusterCallers)
	if err != nil {
		b.Fatal(err)
	}
	defer parked.stop()
	paths := []struct {
		metric string
		fn     callFunc
	}{
		{"stream-sync/s", streamPublish(js, d.payload)},
		{"kv-create+cas/s", kvCreateCAS(kv)},
		{"read-only/s", d.callTool(d.client, toolRead)},
		{"write/s", d.callTool(d.client, toolWrite)},
		{"parked/s", parked.call},
	}
	for _, p := range paths { // warm-up: connections, caches, stream leaders
		if _, err := runLoad(ctx, clusterWindow/4, 16, p.fn); err != nil {
			b.Fatalf("%s: %v", p.metric, err)
		}
	}
	b.ResetTimer()
	for range b.N {
		for _, p := range paths {
			l, err := runLoad(ctx, clusterWindow, clusterCallers, p.fn)
			if err != nil {
				b.Fatalf("%s: %v", p.metric, err)
			}
			b.ReportMetric(l.throughput(), p.metric)
		}
		rate, err := streamPipelined(ctx, js, d.payload, clusterWindow)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rate, "stream-async/s")
	}
	b.StopTimer()
	info, err := js.Stream(ctx, stream)
	if err == nil {
		b.ReportMetric(float64(info.CachedInfo().Config.Replicas), "replicas")
	}
}

// The cluster benchmark's window and callers.
const (
	clusterWindow  = 3 * time.Second
	clusterCallers = 64
)

// streamPublish stores data in the events stream (a subject of its own
// per caller, a fresh message id per publish) and waits for each
// acknowledgement.
func streamPublish(js jetstream.JetStream, data []byte) callFunc {
	subj := bus.NewSubjects("")
	return func(ctx context.Context, i int) error {
		_, err := js.Publish(ctx, subj.Events("clbench-"+strconv.Itoa(i)), data, jetstream.WithMsgID(client.NewReplyID()))
		return err
	}
}

// streamPipelined publishes into the events stream without waiting for
// each acknowledgement (at most 4,096 outstanding) for dur, and returns the
// acknowledged messages per second.
func streamPipelined(ctx context.Context, js jetstream.JetStream, data []byte, dur time.Duration) (float64, error) {
	subj := bus.NewSubjects("").Events("clbench-async")
	t0, n := time.Now(), 0
	for time.Since(t0) < dur {
		for range 256 {
			if _, err := js.PublishAsync(subj, data); err != nil {
				return 0, err
			}
		}
		n += 256
		if js.PublishAsyncPending() > 4096 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(callBound):
		return 0, fmt.Errorf("bench: %d async publishes unacknowledged", js.PublishAsyncPending())
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// kvCreateCAS creates a fresh key and updates it at its revision: the two
// writes of a parked record and its answer.
func kvCreateCAS(kv jetstream.KeyValue) callFunc {
	return func(ctx context.Context, i int) error {
		key := "k" + client.NewReplyID()
		rev, err := kv.Create(ctx, key, []byte(`{"state":"parked"}`))
		if err != nil {
			return err
		}
		_, err = kv.Update(ctx, key, []byte(`{"state":"answered"}`), rev)
		return err
	}
}

// parkedCallers gives each caller a session of its own and a watch of
// its events, for park → answer → batch.done.
type parkedCallers struct {
	d      *deployment
	events []*client.Events
}

func newParkedCallers(ctx context.Context, d *deployment, n int) (*parkedCallers, error) {
	p := &parkedCallers{d: d}
	for i := range n {
		ev, err := d.client.Watch(ctx, parkedSession(i))
		if err != nil {
			p.stop()
			return nil, err
		}
		p.events = append(p.events, ev)
	}
	return p, nil
}

func parkedSession(i int) string { return "clpark-" + strconv.Itoa(i) }

func (p *parkedCallers) call(ctx context.Context, i int) error {
	session, id := parkedSession(i), client.NewReplyID()
	reply, err := p.d.client.Call(ctx, session, bus.Batch{Calls: []bus.Call{{ID: "c1", Name: toolParked, Input: benchInput}}},
		client.WithReplyID(id))
	if err != nil {
		return err
	}
	if len(reply.Parked) != 1 {
		return fmt.Errorf("bench: reply %+v parks nothing", reply)
	}
	if err := p.d.client.Answer(ctx, toolParked, session, id, "c1", bus.Answer{State: bus.StateSuccess, Output: bus.Text("yes")}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return awaitDone(ctx, p.events[i], id)
}

func (p *parkedCallers) stop() {
	for _, ev := range p.events {
		ev.Stop()
	}
}
