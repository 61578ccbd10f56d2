package conformance

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestAnswersReachAnyRouter: routers are stateless and interchangeable
// (docs/protocol.md 2, 8): with three routers, parked calls are answered through
// whichever router the queue group picks and every batch completes.
func TestAnswersReachAnyRouter(t *testing.T) {
	s, _ := confirmFixture(t)
	s.startWorker(t, []M{def("handoff", M{"external": true})}, nil, echo)
	s.waitListed(t, "probe", "handoff")
	s.addRouter()
	s.addRouter()
	ev := s.watch(t, "s1")
	for i := range 6 {
		id := fmt.Sprintf("r%d", i)
		r := s.call(t, "s1", id, callsData(Call{ID: "c1", Name: "handoff"}, Call{ID: "c2", Name: "handoff"}, Call{ID: "c3", Name: "ping"}))
		if len(r.Parked) != 2 {
			t.Fatalf("%s: %s", id, jsonOf(r))
		}
		s.answerOK(t, "handoff", "s1", id, "c2", textAnswer("success", "two"))
		s.answerOK(t, "handoff", "s1", id, "c1", textAnswer("success", "one"))
		done := checkBatchEvents(t, ev.until(doneOf(id)), "s1", id, "c1", "c2", "c3")
		wantSuccess(t, done[0], "one")
		wantSuccess(t, done[1], "two")
	}
}

// TestDedupeAcrossRouters: copies of one batch sent at once to several
// routers run a tool that is not read_only once (docs/protocol.md 3.1).
func TestDedupeAcrossRouters(t *testing.T) {
	s := start(t)
	var runs atomic.Int64
	s.serve(t, func(c *execCall) { c.text(fmt.Sprintf("run %d", runs.Add(1))) }, def("deploy"))
	s.addRouter()
	s.addRouter()
	data := callsData(Call{ID: "c1", Name: "deploy"}, Call{ID: "c2", Name: "deploy"})
	var ps []*pendingReply
	for range 6 {
		ps = append(ps, s.callAsync(t, "s1", "turn", data))
	}
	var mu sync.Mutex
	var first string
	for _, p := range ps {
		r := p.reply(t, "s1", "turn")
		mu.Lock()
		if first == "" {
			first = jsonOf(r.Results)
		} else if jsonOf(r.Results) != first {
			t.Errorf("copies got different results: %s vs %s", jsonOf(r.Results), first)
		}
		mu.Unlock()
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d runs for two calls sent six times, want 2", n)
	}
}
