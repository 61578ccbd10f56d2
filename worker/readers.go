package worker

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/life"
)

// readers are the goroutines that take the exec requests of every tool
// endpoint off one channel (the endpoints' subscriptions deliver into it)
// and serve each where it was read, as a leader and its followers
// (docs/worker.md, "the hand-off"): one reader at a time, the leader,
// waits on the channel and serves what it takes; one busy for longer than
// promoteAfter promotes others (followers, or new goroutines up to limit:
// one per request waiting past one long call, one past a run of short ones);
// a reader done serving while another leads follows, and followers idle
// for idleTime exit.
type readers struct {
	ch       chan *nats.Msg
	serve    func(*nats.Msg)
	idleTime time.Duration
	after    time.Duration // promoteAfter
	limit    int64         // readers at most

	all atomic.Int64 // readers now, counted before each starts

	parked    atomic.Int64 // readers waiting on ch (or just past it): 0 or 1, only ever set from 0
	followers atomic.Int64 // len(idle), for the promotion's check and the tests
	idleMu    sync.Mutex
	idle      []*reader     // the followers, the one that followed last on top
	spawns    atomic.Int64  // readers to start (spawner)
	more      chan struct{} // wakes the spawner
	quit      chan struct{}
	once      sync.Once
	wg        sync.WaitGroup

	decided func(placed bool) // tests: called as a reader ends a streak, placed if it waits on the channel
}

// maxIdle bounds the followers that wait at once.
const maxIdle = 256

// promoteAfter is how long a reader serves without waiting on the channel
// before it promotes another.
const promoteAfter = 100 * time.Microsecond

// newReaders makes the readers of a channel of size requests, at most
// limit of them (readerLimit); start starts them.
func newReaders(size int, idle time.Duration, limit int, serve func(*nats.Msg)) *readers {
	return &readers{ch: make(chan *nats.Msg, size), serve: serve, idleTime: idle, after: promoteAfter, limit: int64(max(limit, 1)),
		more: make(chan struct{}, 1), quit: make(chan struct{})}
}

// start starts the first reader and the spawner.
func (rs *readers) start() *readers {
	rs.all.Store(1)
	rs.wg.Go(rs.read)
	rs.wg.Go(rs.spawner)
	return rs
}

// spawner starts the readers fire asks for, so that they carry the
// profiler labels of the goroutine that made the readers.
func (rs *readers) spawner() {
	for {
		select {
		case <-rs.more:
			for n := rs.spawns.Swap(0); n > 0; n-- {
				rs.wg.Go(rs.read) // counted in rs.all by fire
			}
		case <-rs.quit:
			return
		}
	}
}

// readerLimit is the readers of a worker of maxConcurrent slots: readers
// beyond the slots and the cores would only wait.
func readerLimit(maxConcurrent int) int { return maxConcurrent + runtime.GOMAXPROCS(0) + 1 }

// reader is one reader's state: its streak of serving is busy until it
// waits on the channel again, or promoted once its timer fired.
type reader struct {
	rs    *readers
	state atomic.Int32
	timer *time.Timer
	// took counts the requests taken; armed is took when the timer was
	// armed, so fire tells one long call from a run of short ones.
	took, armed atomic.Int64
	// wake takes the one promotion of a follower (sent under idleMu, never
	// blocking); idle is its timer as a follower.
	wake chan struct{}
	idle *time.Timer
}

const (
	waiting  = iota // not serving
	busy            // serving, its timer armed
	promoted        // serving, and another reader promoted
)

func (rs *readers) read() {
	defer rs.all.Add(-1)
	r := &reader{rs: rs, wake: make(chan struct{}, 1), idle: time.NewTimer(time.Hour)}
	r.idle.Stop()
	r.timer = time.AfterFunc(time.Hour, r.fire)
	r.timer.Stop()
	defer r.timer.Stop()
	for r.lead() && r.follow() {
	}
}

// lead serves requests until the channel is empty and another reader
// waits on it (true: follow), or until the readers close (false).
func (r *reader) lead() bool {
	rs := r.rs
	for {
		select {
		case m := <-rs.ch:
			r.took.Add(1)
			if r.state.Load() == waiting {
				r.begin()
			}
			rs.serve(m)
			continue
		default:
		}
		r.end()
		// Only a reader that takes the place from 0 waits on the channel:
		// with Add(1) and back, two could each see the other counted and
		// both follow (TestReadersNeverAllFollow).
		placed := rs.parked.CompareAndSwap(0, 1)
		if rs.decided != nil {
			rs.decided(placed)
		}
		if !placed {
			return true
		}
		select {
		case m := <-rs.ch:
			rs.parked.Add(-1)
			r.took.Add(1)
			r.begin()
			rs.serve(m)
		case <-rs.quit:
			rs.parked.Add(-1)
			for { // what the subscriptions delivered before they closed
				select {
				case m := <-rs.ch:
					rs.serve(m)
				default:
					return false
				}
			}
		}
	}
}

// follow waits to be promoted (true), or exits (false). The followers
// are a stack: a promotion wakes the warmest, and those a burst left
// behind stay at the bottom until they idle out (docs/worker.md).
func (r *reader) follow() bool {
	rs := r.rs
	rs.idleMu.Lock()
	if len(rs.idle) >= maxIdle {
		rs.idleMu.Unlock()
		return false
	}
	rs.idle = append(rs.idle, r)
	rs.followers.Store(int64(len(rs.idle)))
	rs.idleMu.Unlock()
	r.idle.Reset(rs.idleTime)
	defer r.idle.Stop()
	select {
	case <-r.wake:
		return true
	case <-r.idle.C:
	case <-rs.quit:
	}
	if !rs.unfollow(r) { // promoted meanwhile: its wake is sent
		<-r.wake
		return true
	}
	return false
}

// unfollow takes r off the followers, unless a promotion took it first.
func (rs *readers) unfollow(r *reader) bool {
	rs.idleMu.Lock()
	defer rs.idleMu.Unlock()
	for i, f := range rs.idle {
		if f == r {
			rs.idle = slices.Delete(rs.idle, i, i+1)
			rs.followers.Store(int64(len(rs.idle)))
			return true
		}
	}
	return false
}

// promote wakes the follower that followed last, if any.
func (rs *readers) promote() bool {
	rs.idleMu.Lock()
	defer rs.idleMu.Unlock()
	n := len(rs.idle)
	if n == 0 {
		return false
	}
	r := rs.idle[n-1]
	rs.idle[n-1] = nil
	rs.idle = rs.idle[:n-1]
	rs.followers.Store(int64(n - 1))
	r.wake <- struct{}{}
	return true
}

func (r *reader) begin() {
	r.state.Store(busy)
	r.armed.Store(r.took.Load())
	r.timer.Reset(r.rs.after)
}

func (r *reader) end() {
	if r.state.Load() == waiting {
		return
	}
	r.timer.Stop()
	r.state.Store(waiting)
}

// fire runs when r has served for promoteAfter without waiting.
func (r *reader) fire() {
	if !r.state.CompareAndSwap(busy, promoted) {
		return
	}
	rs := r.rs
	if rs.parked.Load() > 0 {
		return
	}
	woke := false
	n := len(rs.ch) + 1 // past one long call: one for each request waiting, one to wait on the channel
	if r.took.Load() != r.armed.Load() {
		n = 1 // past a run of short calls: one more reader shares them (and may promote another)
	}
	for ; n > 0; n-- {
		if rs.promote() {
			woke = true
			continue
		}
		if rs.all.Add(1) > rs.limit {
			rs.all.Add(-1)
			break
		}
		woke = true
		rs.spawns.Add(1)
		select {
		case rs.more <- struct{}{}:
		default: // the spawner has been told
		}
	}
	// At the limit, a follower that came just after promote found none:
	// try again after promoteAfter, lest a long call hold the channel.
	if !woke && rs.followers.Load() > 0 && r.state.CompareAndSwap(promoted, busy) {
		r.timer.Reset(rs.after)
	}
}

// close makes the readers serve what the channel holds and exit, once the
// subscriptions that deliver into it are closed; wait waits for them.
func (rs *readers) close() { rs.once.Do(func() { close(rs.quit) }) }

// wait waits until every reader has exited, or ctx ends.
func (rs *readers) wait(ctx context.Context) { life.WaitFor(ctx, &rs.wg) }
