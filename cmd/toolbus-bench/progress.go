package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progressLine prints "<what>: <elapsed> of <total>" while a long command
// runs: on a terminal, on one line of w rewritten every 2 s (cleared by
// stop); into a file or a pipe (a CI log), as a plain line every 30 s.
// total may be zero when unknown. Other writers (tests) get nothing.
func progressLine(w io.Writer, what string, total time.Duration) (stop func()) {
	f, ok := w.(*os.File)
	if !ok {
		return func() {}
	}
	every, before, after, clear := 2*time.Second, "\r\033[K", "", "\r\033[K"
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		every, before, after, clear = 30*time.Second, "", "\n", "" // a line every 30 s, none to clear
	}
	start := time.Now()
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(f, clear)
				return
			case <-t.C:
				line := fmt.Sprintf("%s: %s", what, time.Since(start).Round(time.Second))
				if total > 0 {
					line += fmt.Sprintf(" of about %s", total.Round(time.Second))
				}
				fmt.Fprint(f, before+line+after)
			}
		}
	}()
	return func() { close(done); <-ended }
}
