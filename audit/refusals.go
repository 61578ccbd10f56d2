package audit

import (
	"maps"
	"sync"
	"time"
)

// Refusal records are bounded per caller (RefusalBurst per RefusalWindow);
// the next record counts those left out (Record.Suppressed).
const (
	RefusalBurst  = 10
	RefusalWindow = time.Minute
	// maxCallers bounds the callers followed; past it ended windows, then
	// all, are dropped (losing counts, never exceeding a burst).
	maxCallers = 4096
)

// Refusals decides which refusals of a caller are recorded. The zero value
// is ready; it is safe for concurrent use.
type Refusals struct {
	mu sync.Mutex
	m  map[string]*refusalWindow
}

type refusalWindow struct {
	start      time.Time
	n          int   // records in this window
	suppressed int64 // refusals not recorded since the caller's last record
}

// Take reports whether a refusal of caller at now is recorded, and if so
// how many of its refusals were not recorded before it.
func (r *Refusals) Take(caller string, now time.Time) (record bool, suppressed int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*refusalWindow{}
	}
	w := r.m[caller]
	if w == nil {
		if len(r.m) >= maxCallers {
			// Drop the callers whose window ended, else every caller.
			maps.DeleteFunc(r.m, func(_ string, w *refusalWindow) bool { return now.Sub(w.start) >= RefusalWindow })
			if len(r.m) >= maxCallers {
				clear(r.m)
			}
		}
		w = &refusalWindow{start: now}
		r.m[caller] = w
	}
	if now.Sub(w.start) >= RefusalWindow {
		w.start, w.n = now, 0
	}
	if w.n >= RefusalBurst {
		w.suppressed++
		return false, 0
	}
	w.n++
	suppressed, w.suppressed = w.suppressed, 0
	return true, suppressed
}
