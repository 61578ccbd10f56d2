//go:build race

package bridge

// floodNotices under the race detector: a tenth of the 200,000,
// which still outruns the coalescing many times over; 200,000 took longer
// than the call's 2 minutes on a loaded 2-core machine.
const floodNotices = 20000
