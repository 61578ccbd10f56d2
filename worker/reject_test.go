package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// rejects is an Observer that also counts rejections (worker.RejectObserver).
type rejects struct {
	mu sync.Mutex
	n  map[string]int
}

func (*rejects) Waiting(int)                            {}
func (*rejects) Running(int)                            {}
func (*rejects) Finished(string, string, time.Duration) {}
func (r *rejects) Rejected(tool, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[tool]++
}
func (r *rejects) count(tool string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[tool]
}

// rejecting answers registrations accepting every tool but those named.
func rejecting(names ...string) func(bus.Register) (string, any) {
	return func(r bus.Register) (string, any) {
		ack := bus.RegisterAck{Accepted: []string{}, Rejected: []bus.Rejection{}}
		for _, d := range r.Tools {
			if len(names) > 0 && d.Name == names[0] {
				ack.Rejected = append(ack.Rejected, bus.Rejection{Name: d.Name, Reason: "conflicts with a different live definition"})
				continue
			}
			ack.Accepted = append(ack.Accepted, d.Name)
		}
		return bus.TypeRegisterAck, ack
	}
}

// TestRejectedToolNotServed: a tool whose registration the routers reject
// has no P.exec.<tool> subscription (a request finds no responders), is
// counted and registered again with the same definition; it is served
// once a registration is accepted, and unsubscribed at once when a later
// one is rejected, while the worker's other tool is served throughout
// (issue 26, item 3).
func TestRejectedToolNotServed(t *testing.T) {
	f := newFixture(t, false)
	f.reg.setRespond(rejecting("shell"))
	f.answerRegistrations()
	obs := &rejects{n: map[string]int{}}
	w := f.startWorker(worker.Config{Heartbeat: 50 * time.Millisecond, Observer: obs}, func(w *worker.Worker) {
		raw(t, w, "echo", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) { return textOut("echo"), nil })
		raw(t, w, "shell", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) { return textOut("ran"), nil })
	})
	served := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		defer cancel()
		_, err := f.nc.RequestMsgWithContext(ctx, eventMsg(t, f.subj.Workers.Exec("shell"), execEvent(t, "shell", "c1", `{}`)))
		return err
	}
	if err := served(); !errNoResponders(err) {
		t.Fatalf("a rejected tool was subscribed: %v", err)
	}
	if got := w.Served(); len(got) != 1 || got[0] != "echo" {
		t.Fatalf("served %v, want [echo]", got)
	}
	wantText(t, f.exec(t, execEvent(t, "echo", "c1", `{}`), "echo"), bus.StateSuccess, "echo")
	// Every beat registers the same definition again, and each rejection counts.
	n := len(f.reg.registrations())
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		if len(f.reg.registrations()) < n+2 || obs.count("shell") < 3 {
			return errors.New("no beats yet")
		}
		return nil
	})
	first := map[string]string{} // each tool's first definition, one per request (protocol 1.12)
	for _, r := range f.reg.registrations() {
		if len(r.Tools) != 1 {
			t.Fatalf("a registration of %d tools: %s", len(r.Tools), jsonOf(r))
		}
		name := r.Tools[0].Name
		if _, ok := first[name]; !ok {
			first[name] = jsonOf(r.Tools)
		}
		if jsonOf(r.Tools) != first[name] {
			t.Fatalf("the definition changed between registrations:\n%s\n%s", jsonOf(r.Tools), first[name])
		}
	}
	// Accepted: served.
	f.reg.setRespond(acceptAll)
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		if len(w.Served()) != 2 {
			return errors.New("shell not served yet")
		}
		return nil
	})
	// Rejected again: unsubscribed by the next beat.
	f.reg.setRespond(rejecting("shell"))
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		if err := served(); !errNoResponders(err) {
			return errors.New("shell still subscribed")
		}
		return nil
	})
	wantText(t, f.exec(t, execEvent(t, "echo", "c2", `{}`), "echo"), bus.StateSuccess, "echo")
}
