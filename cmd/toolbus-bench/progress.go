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
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return plainProgress(f, what, total)
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

// plainProgress is progressLine's output for a file or a pipe: a line
// every 30 s, none to clear.
func plainProgress(f *os.File, what string, total time.Duration) (stop func()) {
	start := time.Now()
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				line := fmt.Sprintf("%s: %s", what, time.Since(start).Round(time.Second))
				if total > 0 {
					line += fmt.Sprintf(" of about %s", total.Round(time.Second))
				}
				fmt.Fprintln(f, line)
			}
		}
	}()
	return func() { close(done); <-ended }
}
