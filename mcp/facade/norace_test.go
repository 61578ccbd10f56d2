//go:build !race

package facade

const raceEnabled = false
