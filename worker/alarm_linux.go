package worker

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// fdAlarm is a reader's promotion timer kept by the kernel: a timerfd that
// a goroutine of its own reads through the runtime's netpoller, running
// fire at each expiry. Setting it is one system call that wakes no thread;
// a runtime timer that becomes the earliest makes the runtime wake one,
// which cost the worker ~1.2 µs a call (docs/worker.md, "the promotion's
// clock").
type fdAlarm struct {
	fd int
	f  *os.File
}

// newAlarm returns fire's alarm, stopped: a timerfd, or a runtime timer
// if the kernel gives none.
func newAlarm(fire func()) alarm {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return goAlarm(fire)
	}
	a := &fdAlarm{fd: fd, f: os.NewFile(uintptr(fd), "promotion")}
	go func() {
		var n [8]byte
		for {
			if _, err := a.f.Read(n[:]); err != nil {
				return // closed
			}
			fire()
		}
	}()
	return a
}

// set arms the timerfd for d from now, or disarms it (d 0), dropping an
// expiry not yet read. Only its reader, or its fire while the reader is
// in a streak, sets it, so it is never set once closed.
func (a *fdAlarm) set(d time.Duration) {
	_ = unix.TimerfdSettime(a.fd, 0, &unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}, nil)
}

func (a *fdAlarm) close() { _ = a.f.Close() }
