//go:build race

package replies

// raceEnabled: the race detector makes allocations of its own, so the
// tests that count allocations do not judge them under -race.
const raceEnabled = true
