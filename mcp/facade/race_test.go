//go:build race

package facade

// raceEnabled: the race detector slows a session's creation about
// fifteen-fold, so TestEviction opens fewer sessions under it.
const raceEnabled = true
