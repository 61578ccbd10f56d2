package worker

import (
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/slab"
)

// callTable is what the worker knows of its calls: accepted until answered
// (listed in every beat), running (cancellable by key), and cancels seen
// lately. Safe for concurrent use.
type callTable struct {
	subj   bus.Subjects
	linger time.Duration // an answered call stays listed in the beats (docs/protocol.md 5.7)

	mu        sync.Mutex
	inflight  map[string]*Call      // bus.CallKey → call
	queued    map[string]string     // bus.CallKey → tool, from arrival to reply
	answered  answeredRing          // the calls answered last, for linger after their reply
	cancelled map[string]seenCancel // keys of cancels seen lately: bus.CallKey, with an empty call id for a whole reply
	order     []remembered          // cancelled's keys in arrival order, at most maxCancels
}

// seenCancel is a cancel remembered: when it came, and its event's id, which
// the result of a call it cuts off names (1.30; "": not a valid id).
type seenCancel struct {
	at time.Time
	id string
}

// remembered is a cancel's key as it came, with when.
type remembered struct {
	key string
	at  time.Time
}

// maxCancels bounds the cancels a worker remembers: any agent may cancel
// made-up ids on its own session's subject, which every worker reads
// (docs/security.md); the Python and Java workers keep as many.
const maxCancels = 1 << 16

func newCallTable(subj bus.Subjects) *callTable {
	return &callTable{subj: subj, inflight: map[string]*Call{}, queued: map[string]string{}, cancelled: map[string]seenCancel{}}
}

// keys are the blocks call keys are carved from (callKey).
var keys slab.Pool

// callKey is bus.CallKey(session, reply, call), carved from a shared block.
func callKey(session, reply, call string) string {
	return keys.Make(len(session)+len(reply)+len(call)+2, func(b []byte) []byte {
		b = append(b, session...)
		b = append(b, '.')
		b = append(b, reply...)
		b = append(b, '.')
		return append(b, call...)
	})
}

// answered is a call key of tool answered at, listed until linger has passed.
type answered struct {
	key, tool string
	at        time.Time
}

// answeredRing keeps the last maxAnswered calls answered; the beat dedupes
// what to list (queuedByTool).
type answeredRing struct {
	all  []answered // at most maxAnswered, allocated at the first answer
	next int        // where the next answer goes, once all is full
}

func (r *answeredRing) add(a answered) {
	if len(r.all) < maxAnswered {
		if r.all == nil {
			r.all = make([]answered, 0, maxAnswered)
		}
		r.all = append(r.all, a)
		return
	}
	r.all[r.next] = a
	r.next = (r.next + 1) % maxAnswered
}

// newestFirst calls each for the answers kept, newest first, until it reports false.
func (r *answeredRing) newestFirst(each func(a *answered) bool) {
	n := len(r.all)
	newest := n - 1
	if n == maxAnswered {
		newest = (r.next - 1 + n) % n // full: next is the oldest
	}
	for i := range n {
		if !each(&r.all[(newest-i+n)%n]) {
			return
		}
	}
}

// queue lists call key of tool from its arrival; unqueue once it is answered.
func (ct *callTable) queue(key, tool string) {
	ct.mu.Lock()
	ct.queued[key] = tool
	ct.mu.Unlock()
}

func (ct *callTable) unqueue(key string) {
	if key == "" {
		return
	}
	ct.mu.Lock()
	if tool, ok := ct.queued[key]; ok && ct.linger > 0 {
		ct.answered.add(answered{key: key, tool: tool, at: time.Now()}) // under the lock: the ring is in time order
	}
	delete(ct.queued, key)
	ct.mu.Unlock()
}

// holds reports whether call key is accepted and not yet answered here.
func (ct *callTable) holds(key string) bool {
	ct.mu.Lock()
	_, ok := ct.queued[key]
	ct.mu.Unlock()
	return ok
}

// queuedLen counts the calls accepted and not yet answered.
func (ct *callTable) queuedLen() int {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return len(ct.queued)
}

// queuedByTool is the registration's "inflight": per tool, the keys of its
// calls accepted and not yet answered, and of those answered within linger.
func (ct *callTable) queuedByTool() map[string][]string {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	out := map[string][]string{}
	for key, tool := range ct.queued { // accepted, running or waiting for a slot
		out[tool] = append(out[tool], key)
	}
	now := time.Now()
	listed := map[string]bool{}
	ct.answered.newestFirst(func(a *answered) bool {
		if now.Sub(a.at) >= ct.linger {
			return false // and every older one
		}
		if _, queued := ct.queued[a.key]; !queued && !listed[a.key] {
			listed[a.key] = true
			out[a.tool] = append(out[a.tool], a.key)
		}
		return true
	})
	return out
}

// maxAnswered bounds the answered calls a beat lists, the newest kept: at
// 2,700 calls/s over a 15 s linger a beat passed the 1 MiB payload limit.
const maxAnswered = 2048

// begin lists c as running under key and reports whether a cancel of it,
// or of its whole reply, came first: c is then aborted for that cancel,
// which its result names (1.30).
func (ct *callTable) begin(key string, c *Call) (cancelled bool) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	ct.inflight[key] = c
	if len(ct.cancelled) == 0 {
		return false // the usual case: no key to build
	}
	ct.forget(time.Now()) // a cancel older than cancelMemory no longer counts
	seen, cancelled := ct.cancelled[key]
	if !cancelled {
		seen, cancelled = ct.cancelled[bus.CallKey(c.SessionID, c.ReplyID, "")]
	}
	if cancelled {
		c.abort(seen.id)
	}
	return cancelled
}

// end unlists c, unless another call took its key since.
func (ct *callTable) end(key string, c *Call) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.inflight[key] == c {
		delete(ct.inflight, key)
	}
}

// onCancel takes a cancel of P.cancel.<session>: it cancels the named calls
// (all of the reply's without names) and remembers it for cancelMemory.
func (ct *callTable) onCancel(m *nats.Msg) {
	session, ok := ct.subj.Token(m.Subject, "cancel")
	if !ok || !bus.ValidID(session) {
		return
	}
	e, err := bus.Decode(m)
	if err != nil || e.Type != bus.TypeCallCancel || !bus.ValidID(e.ReplyID) {
		return
	}
	var c bus.Cancel
	if len(e.Data) > 0 {
		_ = json.Unmarshal(e.Data, &c)
	}
	if len(c.Calls) > bus.MaxCancelCalls {
		return // bad input (3.5): no honest cancel names more; nothing is cancelled
	}
	seen := seenCancel{time.Now(), ""}
	if bus.ValidID(e.ID) { // a megabyte's id would make the result too large to send
		seen.id = strings.Clone(e.ID) // not a view of the message: it is kept
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if len(c.Calls) == 0 {
		prefix := bus.CallKey(session, e.ReplyID, "") // identifiers hold no dots
		ct.remember(prefix, seen)
		for k, call := range ct.inflight {
			if len(k) > len(prefix) && strings.HasPrefix(k, prefix) {
				call.abort(seen.id)
			}
		}
		return
	}
	for _, id := range c.Calls {
		if !bus.ValidID(id) {
			continue // no call has it
		}
		key := bus.CallKey(session, e.ReplyID, id)
		ct.remember(key, seen)
		if call, ok := ct.inflight[key]; ok {
			call.abort(seen.id)
		}
	}
}

// remember notes a cancel of key (then forget). Called with ct.mu held.
func (ct *callTable) remember(key string, seen seenCancel) {
	ct.cancelled[key] = seen
	ct.order = append(ct.order, remembered{key, seen.at})
	ct.forget(seen.at)
}

// forget drops, oldest first, the cancels past cancelMemory at now or past
// maxCancels. Called with ct.mu held.
func (ct *callTable) forget(now time.Time) {
	for len(ct.order) > maxCancels || len(ct.order) > 0 && now.Sub(ct.order[0].at) > cancelMemory {
		r := ct.order[0]
		ct.order[0] = remembered{}
		ct.order = ct.order[1:]
		if ct.cancelled[r.key].at == r.at { // not cancelled again since
			delete(ct.cancelled, r.key)
		}
	}
}
