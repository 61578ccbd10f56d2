//go:build !linux

package worker

// newAlarm returns fire's alarm, stopped: a runtime timer.
func newAlarm(fire func()) alarm { return goAlarm(fire) }
