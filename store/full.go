package store

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStream's error codes for a store out of space: the server's (10023),
// the account's (10002, 10047), a stream's max bytes with discard new (10077).
const (
	codeInsufficientResources = 10023
	codeAccountResources      = 10002
	codeStorageResources      = 10047
	codeStoreFailed           = 10077
)

// fullTexts are the texts of those errors, for errors that reach us without
// their API code (an async publish's, a wrapped one).
var fullTexts = []string{"insufficient resources", "insufficient storage", "resource limits exceeded", "maximum bytes exceeded"}

// IsFull reports whether err says JetStream refused a write for want of
// space. Such a write is refused as long as nobody frees space, so the hot
// path does not retry it (see Policy.RideOutFull).
func IsFull(err error) bool {
	if err == nil {
		return false
	}
	if apiErr, ok := errors.AsType[*jetstream.APIError](err); ok {
		switch apiErr.ErrorCode {
		case codeInsufficientResources, codeAccountResources, codeStorageResources:
			return true
		case codeStoreFailed:
			return strings.Contains(apiErr.Description, "maximum bytes")
		}
	}
	msg := err.Error()
	return slices.ContainsFunc(fullTexts, func(s string) bool { return strings.Contains(msg, s) })
}

// FullText is the text every result refused for a full store starts with
// (docs/protocol.md 3.3, `internal`): "InternalError: store full: ...".
const FullText = "store full"

// Health is what one process has seen of the store's space: the last write
// refused as full, until a write succeeds again (`toolbus status`). Safe
// for concurrent use; the zero value is healthy.
type Health struct {
	mu    sync.Mutex
	full  bool
	why   string    // the last refusal's error text
	since time.Time // the first refusal of this spell
}

// Note records the outcome of a write: a full refusal marks the store full,
// a success marks it healthy again (space came back). Other errors say
// nothing about space and change nothing. It returns IsFull(err).
func (h *Health) Note(err error) bool {
	if h == nil {
		return IsFull(err)
	}
	full := IsFull(err)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		h.full, h.why = false, ""
	case full:
		if !h.full {
			h.since = time.Now()
		}
		h.full, h.why = true, reason(err)
	}
	return full
}

// Full reports whether the last write noted was refused for want of space,
// with JetStream's reason and when the spell began.
func (h *Health) Full() (full bool, why string, since time.Time) {
	if h == nil {
		return false, "", time.Time{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.full, h.why, h.since
}

// reason is JetStream's own description of a full refusal, without the
// "nats: API error: code=... err_code=... description=" framing.
func reason(err error) string {
	if apiErr, ok := errors.AsType[*jetstream.APIError](err); ok && apiErr.Description != "" {
		return apiErr.Description
	}
	msg := err.Error()
	for _, s := range fullTexts {
		if strings.Contains(msg, s) {
			return s
		}
	}
	return msg
}
