package xtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// Readiness is how a deployment waits, through the protocol only: it asks
// the routers of the Fleet, from one connection of the Net per node,
// until each one that serves gives the answer wanted. A Deployment
// embeds it.
type Readiness struct {
	net   *Net
	fleet *Fleet
	subj  bus.Subjects
	bound time.Duration

	mu     sync.Mutex
	probes []*nats.Conn // one per node, for EveryRouter
}

func newReadiness(net *Net, fleet *Fleet, cfg Config) *Readiness {
	return &Readiness{net: net, fleet: fleet, subj: fleet.subj, bound: cfg.Bound}
}

// Bound is the limit of every wait.
func (r *Readiness) Bound() time.Duration { return r.bound }

// probe returns the prober connection of node i.
func (r *Readiness) probe(ctx context.Context, i int) (*nats.Conn, error) {
	r.mu.Lock()
	if r.probes == nil {
		r.probes = make([]*nats.Conn, r.net.Nodes())
	}
	nc := r.probes[i]
	r.mu.Unlock()
	if nc != nil {
		return nc, nil
	}
	nc, err := r.net.connectNode(ctx, RoleClient, i)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.probes[i] = nc
	r.mu.Unlock()
	return nc, nil
}

// forget drops the prober connections (Close closes them with the rest).
func (r *Readiness) forget() {
	r.mu.Lock()
	r.probes = nil
	r.mu.Unlock()
}

// poll is how often the waits ask again.
const poll = 5 * time.Millisecond

// EveryRouter sends the request that msg builds (anything routers answer in
// queue group P-router: P.admin.<verb>, P.tools.<session>) again and again,
// from every node, until each router that serves has answered it with an
// event that check accepts; a router's answers are told apart by their
// source. An error event is handed to check like any other. It returns the
// last check error when the bound or ctx ends first. A router that is
// draining (unsubscribed, not closed yet) never answers: do not wait on one.
func (r *Readiness) EveryRouter(ctx context.Context, msg func() (*nats.Msg, error), check func(*bus.Event) error) error {
	ctx, cancel := context.WithTimeout(ctx, r.bound)
	defer cancel()
	ok := map[string]bool{}
	var last error
	for {
		want := r.fleet.serving()
		done := true
		for id := range want {
			done = done && ok[id]
		}
		if done {
			return nil
		}
		for i := range r.net.Nodes() {
			if err := r.ask(ctx, i, msg, check, ok); err != nil && ctx.Err() == nil {
				last = err
			}
		}
		if bus.Sleep(ctx, poll) != nil {
			var missing []string
			for id := range r.fleet.serving() {
				if !ok[id] {
					missing = append(missing, id)
				}
			}
			slices.Sort(missing)
			return fmt.Errorf("xtest: routers %s: %w (last: %v)", strings.Join(missing, ", "), ctx.Err(), last)
		}
	}
}

// ask sends one request from node i and records whether its router passed.
func (r *Readiness) ask(ctx context.Context, i int, msg func() (*nats.Msg, error), check func(*bus.Event) error, ok map[string]bool) error {
	nc, err := r.probe(ctx, i)
	if err != nil {
		return err
	}
	m, err := msg()
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := nc.RequestMsgWithContext(rctx, m)
	if err != nil {
		return err
	}
	e, err := bus.Decode(resp)
	if err != nil {
		return err
	}
	id := strings.TrimPrefix(e.Source, "toolbus/router/")
	if err := check(e); err != nil {
		ok[id] = false
		return fmt.Errorf("router %s: %w", id, err)
	}
	ok[id] = true
	return nil
}

// StatusMsg builds a P.admin.status request.
func (r *Readiness) StatusMsg() (*nats.Msg, error) {
	e, err := bus.NewEvent(bus.TypeAdmin, "toolbus/xtest", struct{}{})
	if err != nil {
		return nil, err
	}
	return e.Msg(r.subj.Admin("status"))
}

// EveryStatus is EveryRouter with P.admin.status: check gets each router's
// status.
func (r *Readiness) EveryStatus(ctx context.Context, check func(bus.Status) error) error {
	return r.EveryRouter(ctx, r.StatusMsg, func(e *bus.Event) error {
		if e.Type != bus.TypeAdminReply {
			return fmt.Errorf("status reply %s: %s", e.Type, e.Data)
		}
		var st bus.Status
		if err := e.DataAs(&st); err != nil {
			return err
		}
		return check(st)
	})
}

// WaitLive waits until every router that serves reports each named tool
// live in its P.admin.status.
func (r *Readiness) WaitLive(ctx context.Context, names ...string) error {
	return r.EveryStatus(ctx, func(st bus.Status) error { return st.CheckLive(names...) })
}

// WaitGone waits until no router that serves reports any named tool live.
func (r *Readiness) WaitGone(ctx context.Context, names ...string) error {
	return r.EveryStatus(ctx, func(st bus.Status) error {
		for _, n := range names {
			if st.Live(n) {
				return fmt.Errorf("tool %s still live", n)
			}
		}
		return nil
	})
}

// waitServed waits, on a cluster, until a request sent on every node finds
// a router.
func (r *Readiness) waitServed(ctx context.Context) error {
	if r.net.Cluster == nil || !r.fleet.started() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.bound)
	defer cancel()
	for i := range r.net.Nodes() {
		for {
			err := r.ask(ctx, i, r.StatusMsg, func(*bus.Event) error { return nil }, map[string]bool{})
			if err == nil {
				break
			}
			if bus.Sleep(ctx, poll) != nil {
				return fmt.Errorf("xtest: no router answers on node %d: %w", i, errors.Join(ctx.Err(), err))
			}
		}
	}
	return nil
}
