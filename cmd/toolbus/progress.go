package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progressLine prints "<what>: <elapsed> of <total>" on one rewritten line
// of w every few seconds while a long command runs, when w is a terminal
// (never into a file or a pipe, where it would only be noise); stop ends
// it and clears the line. total may be zero when unknown.
func progressLine(w io.Writer, what string, total time.Duration) (stop func()) {
	f, ok := w.(*os.File)
	if !ok {
		return func() {}
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return func() {}
	}
	start := time.Now()
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(f, "\r\033[K")
				return
			case <-t.C:
				line := fmt.Sprintf("%s: %s", what, time.Since(start).Round(time.Second))
				if total > 0 {
					line += fmt.Sprintf(" of about %s", total.Round(time.Second))
				}
				fmt.Fprint(f, "\r\033[K"+line)
			}
		}
	}()
	return func() { close(done); <-ended }
}
