//go:build !race

package replies

const raceEnabled = false
