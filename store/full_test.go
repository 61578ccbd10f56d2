package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func apiErr(code, errCode int, desc string) error {
	return &jetstream.APIError{Code: code, ErrorCode: jetstream.ErrorCode(errCode), Description: desc}
}

func TestIsFull(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		full bool
	}{
		{"nil", nil, false},
		{"server limit", apiErr(503, 10023, "insufficient resources"), true},
		{"account limit", apiErr(400, 10002, "resource limits exceeded for account"), true},
		{"account storage", apiErr(500, 10047, "insufficient storage resources available"), true},
		{"bucket max bytes", apiErr(503, 10077, "maximum bytes exceeded"), true},
		{"other store failure", apiErr(503, 10077, "message too large"), false},
		{"wrapped", fmt.Errorf("ledger: %w", apiErr(503, 10023, "insufficient resources")), true},
		{"text only", errors.New("nats: insufficient resources"), true},
		{"no responders", jetstream.ErrNoStreamResponse, false},
		{"conflict", apiErr(400, 10071, "wrong last sequence: 3"), false},
		{"timeout", context.DeadlineExceeded, false},
	} {
		if got := IsFull(tc.err); got != tc.full {
			t.Errorf("%s: IsFull = %v, want %v", tc.name, got, tc.full)
		}
	}
}

func TestHealth(t *testing.T) {
	var h Health
	if full, _, _ := h.Full(); full {
		t.Fatal("a new Health is full")
	}
	h.Note(errors.New("timeout"))
	if full, _, _ := h.Full(); full {
		t.Fatal("a time-out made the store full")
	}
	if !h.Note(apiErr(503, 10023, "insufficient resources")) {
		t.Fatal("Note of a full refusal said not full")
	}
	full, why, since := h.Full()
	if !full || why != "insufficient resources" || since.IsZero() {
		t.Fatalf("after a refusal: %v %q %v", full, why, since)
	}
	h.Note(apiErr(503, 10023, "insufficient resources"))
	if _, _, again := h.Full(); !again.Equal(since) {
		t.Fatal("a second refusal moved the spell's start")
	}
	h.Note(nil)
	if full, _, _ := h.Full(); full {
		t.Fatal("a write that landed left the store full")
	}
	var nilH *Health
	if !nilH.Note(apiErr(503, 10023, "x")) {
		t.Fatal("a nil Health does not report IsFull")
	}
}

// A full refusal ends a write on the hot path at once, and is ridden out by
// the policies that wait for space (UntilLanded, Provision).
func TestRetryFull(t *testing.T) {
	full := apiErr(503, 10023, "insufficient resources")
	n := 0
	start := time.Now()
	err := Retry(t.Context(), Bounded, func(context.Context) error { n++; return full })
	if !IsFull(err) || n != 1 || time.Since(start) > time.Second {
		t.Fatalf("Bounded: %v after %d attempts and %v", err, n, time.Since(start))
	}
	// The account's limit is refused 400, which no other policy retries (flake42).
	for _, full := range []error{full, apiErr(400, 10002, "resource limits exceeded for account")} {
		n = 0
		err = Retry(t.Context(), Policy{Budget: 2 * time.Second, RideOutFull: true}, func(context.Context) error {
			n++
			if n < 3 {
				return full
			}
			return nil
		})
		if err != nil || n != 3 {
			t.Errorf("RideOutFull through %v: %v after %d attempts", full, err, n)
		}
	}
}
