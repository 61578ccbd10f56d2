// Package presence keeps which routers are alive (docs/protocol.md 8,
// docs/parked.md): each renews its key in P_routers every heartbeat and
// deletes it on a clean stop; the others judge by their own clock, less
// the time they were held (internal/held): a held router read no renewals;
// and only up to the moment their watch last delivered their own renewal: a
// watch that is not reading is no evidence that anyone stopped.
package presence

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/held"
	"github.com/toolbus/toolbus/store"
)

// Beats is how many heartbeats a router's key may go unrenewed before the
// router counts as gone: a lease, as the leases of continuations.
const Beats = 3

// MaxRouters bounds the routers kept, those judged gone dropped first;
// others count as gone (a deduplicated publish, never a lost event).
const MaxRouters = 4096

// Config configures a Presence.
type Config struct {
	// ID is the router's id, its key in the bucket.
	ID string
	// Heartbeat is how often Beat is called; zero means 5 s.
	Heartbeat time.Duration
	// Logger receives warnings; nil discards.
	Logger *slog.Logger
}

// Value is what a router's key holds.
type Value struct {
	Router string `json:"router"`
	// Instance is new each time a router process starts, so that a router
	// restarted under the same id within a lease counts as a new one.
	Instance    string `json:"instance"`
	HeartbeatMS int64  `json:"heartbeat_ms"`
}

// Presence is this router's key and its view of the others'; concurrency-safe.
type Presence struct {
	kv    jetstream.KeyValue
	cfg   Config
	value []byte
	watch *store.Watch
	// live: the watch has delivered the bucket's initial values.
	live  atomic.Bool
	clock *held.Clock // renewals are seen, and judged, by it

	mu    sync.Mutex
	peers map[string]peer
	owner map[string]string // instance -> the one key it holds in peers
	// read: when the watch last delivered this router's own renewal; it had
	// then delivered every renewal put before it (one stream, in order).
	read time.Time
}

// peer is what this router saw of one router's key, on its own clock.
type peer struct {
	instance string
	since    time.Time // when this instance was first seen
	last     time.Time // when its key was last seen put
	gone     bool      // its key was seen deleted (a clean stop) or purged
}

// New returns a Presence over kv (P_routers); call Start.
func New(kv jetstream.KeyValue, cfg Config) *Presence {
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, 5*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	v, _ := json.Marshal(Value{Router: cfg.ID, Instance: nuid.Next(), HeartbeatMS: cfg.Heartbeat.Milliseconds()})
	return &Presence{kv: kv, cfg: cfg, value: v, peers: map[string]peer{}, owner: map[string]string{},
		clock: held.New(time.Now, cfg.Heartbeat/10)}
}

// Start puts this router's key and follows everyone's; the first put is
// retried through an election (store.Bounded), and failing it fails Start.
func (p *Presence) Start(ctx context.Context) error {
	if err := store.Retry(ctx, store.Bounded, func(ctx context.Context) error {
		_, err := p.kv.Put(ctx, p.cfg.ID, p.value)
		return err
	}); err != nil {
		return fmt.Errorf("presence: put %s: %w", p.cfg.ID, err)
	}
	w, err := store.WatchLoaded(ctx, p.kv, ">", p.apply)
	if err != nil {
		return err
	}
	p.watch = w
	p.live.Store(true)
	p.clock.Start(ctx)
	return nil
}

// Beat renews this router's key: once per heartbeat.
func (p *Presence) Beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Heartbeat)
	defer cancel()
	if _, err := p.kv.Put(ctx, p.cfg.ID, p.value); err != nil {
		return fmt.Errorf("presence: renew %s: %w", p.cfg.ID, err)
	}
	return nil
}

// Stop ends the watch and deletes this router's key, so that the others
// know at once that it stopped; safe to call twice.
func (p *Presence) Stop(ctx context.Context) error {
	err := cmp.Or(p.clock.Stop(ctx), store.StopAll(ctx, p.watch))
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Heartbeat)
	defer cancel()
	if derr := p.kv.Delete(ctx, p.cfg.ID); derr != nil && !store.IsNotFound(derr) {
		p.cfg.Logger.Warn("presence: key not removed; the others count this router gone a lease from now", "err", derr)
	}
	return err
}

// Live reports whether the watch has delivered the bucket's initial values.
func (p *Presence) Live() bool { return p.live.Load() }

// Now is the clock Judge reads: this router's, less the time it was held
// (a tick, a tenth of a heartbeat, old at most); the moment a router ended
// something is noted by it.
func (p *Presence) Now() time.Time { return p.clock.Now() }

func (p *Presence) apply(e jetstream.KeyValueEntry) {
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	id := e.Key()
	cur, ok := p.peers[id]
	put := e.Operation() == jetstream.KeyValuePut
	var v Value
	if put {
		if id == p.cfg.ID && bytes.Equal(e.Value(), p.value) {
			p.read = now
		}
		// A router process puts one key, its id, naming itself: a key
		// whose value names another router, or a process another key
		// holds, is no router's (a writer's bug filling the table with
		// live keys: TestAttackOneWriterFillsPresence), and is not kept.
		if json.Unmarshal(e.Value(), &v) != nil || v.Router != id {
			return
		}
		// A claim lasts while its key is renewed: a forged key put once
		// with a live router's instance hid that router from a router
		// that loaded it first, for good (TestAttackForgedClaimHidesARouter).
		if o, taken := p.owner[v.Instance]; taken && o != id {
			if h := p.peers[o]; !h.gone && p.read.Sub(h.last) <= Beats*p.cfg.Heartbeat {
				return
			}
			p.forget(o, p.peers[o])
		}
	}
	if !ok && len(p.peers) >= MaxRouters {
		// Ids are new at each start: forget the routers judged gone
		// whatever they ended (TestAttackRestartsFillPresence).
		for k, pr := range p.peers {
			if pr.gone || p.read.Sub(pr.last) > Beats*p.cfg.Heartbeat {
				p.forget(k, pr)
			}
		}
		if len(p.peers) >= MaxRouters {
			return
		}
	}
	if !put {
		cur.gone, cur.last = true, now
		p.peers[id] = cur
		return
	}
	if !ok || cur.gone || cur.instance != v.Instance {
		p.forget(id, cur)
		cur = peer{instance: v.Instance, since: now}
		p.owner[v.Instance] = id
		p.cfg.Logger.Debug("presence: router seen", "id", id, "instance", v.Instance)
	}
	cur.last = now
	p.peers[id] = cur
}

// forget drops router id, which was pr, and its process's claim; p.mu held.
func (p *Presence) forget(id string, pr peer) {
	delete(p.peers, id)
	if p.owner[pr.instance] == id {
		delete(p.owner, pr.instance)
	}
}

// Verdict is what a Presence says of a router about a moment it ended something.
type Verdict int

// The verdicts of Judge.
const (
	// Unsure: the router may still be finishing; look again later.
	Unsure Verdict = iota
	// Outlived: the same process renewed its key a lease after the moment.
	Outlived
	// Gone: the router's key is gone (a clean stop), stale (no renewal for
	// a lease), not seen for a lease after the moment, or now held by a
	// process started after the moment (a restart under the same id).
	Gone
)

func (v Verdict) String() string {
	return [...]string{"unsure", "outlived", "gone"}[v]
}

// Judge says whether router, which ended something at ended (by Now),
// outlived it by a lease, is gone, or may still be finishing: the time this
// router was held counts neither for nor against router, and a lease without
// its renewals counts only up to when the watch last delivered this router's
// own renewal, so while the watch is behind (a lost consumer being made
// again, a lag) router's absence is judged no further.
func (p *Presence) Judge(router string, ended time.Time) Verdict {
	p.mu.Lock()
	pr, ok := p.peers[router]
	read := p.read
	p.mu.Unlock()
	return judge(pr, ok, ended, read, Beats*p.cfg.Heartbeat)
}

// judge: gone when deleted, stale by lease at read, an instance first seen
// after ended, or unseen a lease after ended by read; outlived when the same
// instance renewed at least lease after ended; else unsure.
func judge(p peer, seen bool, ended, read time.Time, lease time.Duration) Verdict {
	switch {
	case !seen && read.Sub(ended) <= lease:
		return Unsure
	case !seen, p.gone, read.Sub(p.last) > lease, p.since.After(ended):
		return Gone
	case !p.last.Before(ended.Add(lease)):
		return Outlived
	}
	return Unsure
}
