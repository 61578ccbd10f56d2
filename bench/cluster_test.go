package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit"
)

// BenchmarkCluster measures calls/s on one node and on a 3-node cluster in
// this process with every bucket and stream replicated three times (issue
// 27: where one stream saturates): read-only, write (the dedupe ledger),
// session-writing (reset_tools) and parked calls (park → answer →
// batch.done) through one router, next to
// what one stream and one KV bucket take on their own — a synchronous
// publish with a message id per caller (as the router stores batch.done),
// the same pipelined (PublishAsync: the stream's ceiling), and a create
// then a compare-and-set per key (a parked record and its answer). Each
// figure is one window of clusterWindow at clusterCallers callers, with the
// whole process's CPU per operation (every server, router, worker and
// caller share it); run it with
//
//	TOOLBUS_BENCH_CLUSTER=1 go test ./bench -run '^$' -bench 'Cluster$' -benchtime 1x -timeout 10m
//
// Without TOOLBUS_BENCH_CLUSTER it is skipped (it takes about two minutes;
// scripts/test runs every benchmark 100 times). b.N repeats the windows;
// the metrics are the last repetition's.
func BenchmarkCluster(b *testing.B) {
	if os.Getenv("TOOLBUS_BENCH_CLUSTER") == "" {
		b.Skip("set TOOLBUS_BENCH_CLUSTER=1 to measure one node against a 3-node R3 cluster")
	}
	b.Run("nodes=1", func(b *testing.B) { benchScale(b, false) })
	b.Run("nodes=3,R3", func(b *testing.B) { benchScale(b, true) })
}

func benchScale(b *testing.B, cluster bool) {
	ctx := b.Context()
	d, err := deploy(ctx, config{sessions: clusterCallers, cluster: cluster})
	if err != nil {
		b.Fatal(err)
	}
	defer d.close(ctx)
	js := testkit.JetStream(b, d.clientNC)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "clbench", Replicas: d.x.Replicas(), History: 1})
	if err != nil {
		b.Fatal(err)
	}
	parked, err := newParkedCallers(ctx, d, clusterCallers)
	if err != nil {
		b.Fatal(err)
	}
	defer parked.stop(ctx)
	paths := []struct {
		metric string
		fn     callFunc
	}{
		{"stream-sync", streamPublish(js, d.payload)},
		{"kv-create+cas", kvCreateCAS(kv)},
		{"read-only", d.callTool(toolRead)},
		{"write", d.callTool(toolWrite)},
		{"session-write", sessionWrite(d.client, clusterCallers)},
		{"parked", parked.call},
	}
	for _, p := range paths { // warm-up: connections, caches, stream leaders
		if _, err := runLoad(ctx, clusterWindow/4, 16, p.fn); err != nil {
			b.Fatalf("%s: %v", p.metric, err)
		}
	}
	sessions, err := js.Stream(ctx, "KV_"+bus.NewSubjects("").Bucket(bus.BucketSessions))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		for _, p := range paths {
			seq0 := lastSeq(ctx, sessions)
			l, err := d.measureLoad(ctx, clusterWindow, clusterCallers, p.fn)
			if err != nil {
				b.Fatalf("%s: %v", p.metric, err)
			}
			if p.metric == "session-write" { // each call must write the session once
				b.ReportMetric(float64(lastSeq(ctx, sessions)-seq0)/float64(l.Total), "session-writes/call")
			}
			cpu, _ := l.perCall(roleClient)
			b.ReportMetric(l.Throughput(), p.metric+"/s")
			b.ReportMetric(cpu, p.metric+"-cpu-µs")
			b.Logf("%s: %.0f/s at %d callers, %.0f µs CPU each, load average %.1f", p.metric, l.Throughput(), clusterCallers, cpu, loadAvg())
		}
		rate, cpu, err := streamPipelined(ctx, js, d.payload, clusterWindow)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rate, "stream-async/s")
		b.ReportMetric(cpu, "stream-async-cpu-µs")
		b.Logf("stream-async: %.0f/s, %.1f µs CPU each", rate, cpu)
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
// each acknowledgement (about 2,000 outstanding) for dur, and returns the
// acknowledged messages per second and the process's CPU µs per message.
func streamPipelined(ctx context.Context, js jetstream.JetStream, data []byte, dur time.Duration) (rate, cpuUS float64, err error) {
	subj := bus.NewSubjects("").Events("clbench-async")
	t0, cpu0, n := time.Now(), testkit.ProcessCPU(), 0
	for time.Since(t0) < dur {
		for range 256 {
			if _, err := js.PublishAsync(subj, data); err != nil {
				return 0, 0, err
			}
		}
		n += 256
		if js.PublishAsyncPending() > 2048 { // under nats.go's limit of 4,000
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(callBound):
		return 0, 0, fmt.Errorf("bench: %d async publishes unacknowledged", js.PublishAsyncPending())
	}
	return float64(n) / time.Since(t0).Seconds(), float64((testkit.ProcessCPU() - cpu0).Microseconds()) / float64(n), nil
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

// sessionWrite turns the bench group on and off in turn in a session of
// the caller's own (reset_tools): one compare-and-set on the sessions
// bucket per call.
func sessionWrite(c *client.Client, callers int) callFunc {
	on := make([]bool, callers)
	return func(ctx context.Context, i int) error {
		on[i] = !on[i]
		input := json.RawMessage(`{"` + benchGroup + `":` + strconv.FormatBool(on[i]) + `}`)
		reply, err := c.Call(ctx, "clsess-"+strconv.Itoa(i), bus.Batch{Calls: []bus.Call{{ID: "r1", Name: groups.ResetTools, Input: input}}})
		if err != nil {
			return err
		}
		return checkReply(reply, 1)
	}
}

// lastSeq is the stream's last sequence, 0 when it cannot be read.
func lastSeq(ctx context.Context, s jetstream.Stream) uint64 {
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.LastSeq
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
			p.stop(ctx)
			return nil, err
		}
		p.events = append(p.events, ev)
	}
	return p, nil
}

func parkedSession(i int) string { return "clpark-" + strconv.Itoa(i) }

func (p *parkedCallers) call(ctx context.Context, i int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := parkAndAnswer(ctx, p.d, p.events[i], parkedSession(i))
	return err
}

func (p *parkedCallers) stop(ctx context.Context) {
	for _, ev := range p.events {
		_ = ev.Stop(ctx)
	}
}
