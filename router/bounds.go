package router

import (
	"context"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/store"
)

// bounded is the buckets with a soft bound (store.Bound, protocol 1.24)
// by their names in metrics and the admin verb status.
func bounded(st *store.Store) map[string]*store.Bound {
	return map[string]*store.Bound{bus.BucketParked: store.BoundOf(st.Parked),
		bus.BucketSessions: store.BoundOf(st.Sessions), bus.BucketLedger: store.BoundOf(st.Ledger)}
}

// boundStatus is Status.Store.Bounds: each bound's state, in a fixed order.
func boundStatus(ctx context.Context, st *store.Store) []bus.BoundStatus {
	var out []bus.BoundStatus
	bs := bounded(st)
	for _, name := range []string{bus.BucketParked, bus.BucketSessions, bus.BucketLedger} {
		if b := bs[name]; b != nil {
			s := b.State(ctx)
			v := bus.BoundStatus{Bucket: name, Bytes: s.Bytes, Bound: s.Soft, Refused: s.Refused}
			if !s.Last.IsZero() {
				v.LastRefused = &s.Last
			}
			out = append(out, v)
		}
	}
	return out
}

// boundMetrics is metrics.RouterSources.Bounds: each bound's state at a
// scrape, its bytes read again (within the router's life) when a second old.
func boundMetrics(life context.Context, st *store.Store) func() []metrics.Bound {
	return func() []metrics.Bound {
		var out []metrics.Bound
		for _, b := range boundStatus(life, st) {
			out = append(out, metrics.Bound{Bucket: b.Bucket, Bytes: b.Bytes, Soft: b.Bound, Refused: b.Refused})
		}
		return out
	}
}
