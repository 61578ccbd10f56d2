package worker

import "time"

// Observer is told what a worker does, for metrics; metrics.NewWorker
// returns one that keeps Prometheus metrics. The worker package defines the
// hook and imports no metrics library: a tool author who wants none links
// none. Its methods are called from many goroutines at once and must return
// quickly.
type Observer interface {
	// Waiting is called with +1 when a request starts waiting for a free
	// slot (Config.MaxConcurrent) and with -1 when it gets one.
	Waiting(delta int)
	// Running is called with +1 when a call starts running and with -1
	// when it has ended.
	Running(delta int)
	// Finished is called once for every call that ran, with its tool, its
	// result state (bus.StateSuccess, ...) and how long it ran.
	Finished(tool, state string, d time.Duration)
}

// nopObserver is the Observer of a worker configured without one.
type nopObserver struct{}

func (nopObserver) Waiting(int)                            {}
func (nopObserver) Running(int)                            {}
func (nopObserver) Finished(string, string, time.Duration) {}

var _ Observer = nopObserver{}
