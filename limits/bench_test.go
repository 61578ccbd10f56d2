package limits

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// The two ways to keep one shared count on NATS, measured side by side
// (docs/guardrails.md): go test -run - -bench 'Count' -benchtime 2000x ./limits/
// Two connections (two routers) increment one key in parallel.

func benchConns(b *testing.B) [2]jetstream.JetStream {
	s := testkit.RunServer(b)
	var out [2]jetstream.JetStream
	for i := range out {
		js := testkit.JetStream(b, testkit.Connect(b, s))
		out[i] = js
	}
	return out
}

func BenchmarkCountWithCounter(b *testing.B) {
	js := benchConns(b)
	ctx := context.Background()
	if _, err := js[0].CreateStream(ctx, jetstream.StreamConfig{Name: "C", Subjects: []string{"c.>"}, AllowMsgCounter: true}); err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		j := js[n.Add(1)%2]
		for pb.Next() {
			m := nats.NewMsg("c.key")
			m.Header.Set("Nats-Incr", "+1")
			if _, err := j.PublishMsg(ctx, m); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkCountWithKVCAS(b *testing.B) {
	js := benchConns(b)
	ctx := context.Background()
	var kvs [2]jetstream.KeyValue
	for i := range kvs {
		kv, err := js[i].CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "k"})
		if err != nil {
			b.Fatal(err)
		}
		kvs[i] = kv
	}
	var n atomic.Int64
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		kv := kvs[n.Add(1)%2]
		for pb.Next() {
			_, err := store.Update(ctx, kv, "key", store.Bounded, func(cur jetstream.KeyValueEntry) ([]byte, error) {
				v := 0
				if cur != nil {
					v, _ = strconv.Atoi(string(cur.Value()))
				}
				return []byte(strconv.Itoa(v + 1)), nil
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCheck is one call checked against a rate and a budget (two
// rules), uncontended: go test -run - -bench Check ./limits/
func BenchmarkCheck(b *testing.B) {
	js := benchConns(b)
	l, err := New(context.Background(), js[0], bus.NewSubjects(bus.DefaultPrefix), Config{Policy: Policy{Rules: []Rule{
		{Name: "rate", Per: []string{PerUser}, Rate: &Rate{Calls: 1_000_000, IntervalMS: 1000}},
		{Name: "budget", Per: []string{PerUser}, Budget: &Budget{Units: 1 << 40}},
	}}})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if ref, err := l.Check(context.Background(), Call{Tool: "t", User: "alice"}); err != nil || ref != nil {
			b.Fatal(ref, err)
		}
	}
}
