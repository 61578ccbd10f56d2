package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestLookupFault: the work consumer's lookup retries what a later lookup
// may pass and stops at once on what it cannot (a worker that cannot take
// its durable calls says so instead of retrying silently).
func TestLookupFault(t *testing.T) {
	const info = "$JS.API.CONSUMER.INFO.P_WORK.toolbus-work-job"
	denied := func(subject string) error {
		return fmt.Errorf("%w: Permissions Violation for Publish to %q", nats.ErrPermissionViolation, subject)
	}
	for _, tc := range []struct {
		name      string
		err, last error
		fault     string // "": retried
	}{
		{"no responders", nats.ErrNoResponders, nil, ""},
		{"timeout", context.DeadlineExceeded, nil, ""},
		{"nats timeout", nats.ErrTimeout, nil, ""},
		{"consumer not made yet", jetstream.ErrConsumerNotFound, nil, ""},
		{"stream not made yet", &jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound, Description: "stream not found"}, nil, ""},
		{"503 JetStream not enabled for account", &jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabledForAccount}, nil, ""},
		{"500 while a leader is elected", &jetstream.APIError{Code: 500, ErrorCode: 10008}, nil, ""},
		{"timeout after another subject's refusal", context.DeadlineExceeded, denied(info + "-other"), ""},
		{"permission denied", context.DeadlineExceeded, denied(info), "permission denied"},
		{"permission denied, nats timeout", nats.ErrTimeout, denied(info), "permission denied"},
		{"bad consumer name", jetstream.ErrInvalidConsumerName, nil, "invalid consumer name"},
		{"bad stream name", jetstream.ErrInvalidStreamName, nil, "invalid stream name"},
		{"a push consumer", jetstream.ErrNotPullConsumer, nil, "not a pull consumer"},
		{"400 bad request", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest, Description: "bad request"}, nil, "bad request"},
		{"connection closed", nats.ErrConnectionClosed, nil, "connection closed"},
		{"the worker stops", context.Canceled, nil, "context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := lookupFault(tc.err, tc.last, info)
			switch {
			case tc.fault == "" && got != nil:
				t.Fatalf("lookupFault(%v) = %v, want nil (retried)", tc.err, got)
			case tc.fault != "" && (got == nil || !strings.Contains(got.Error(), tc.fault)):
				t.Fatalf("lookupFault(%v) = %v, want an error with %q", tc.err, got, tc.fault)
			}
		})
	}
}

// TestWorkConfig: only the consumer routers make for the tool is used.
func TestWorkConfig(t *testing.T) {
	const filter = "toolbus.work.job"
	ours := jetstream.ConsumerConfig{Durable: "toolbus-work-job", FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy}
	if err := workConfig(ours, filter); err != nil {
		t.Fatalf("the routers' consumer refused: %v", err)
	}
	for name, mod := range map[string]func(*jetstream.ConsumerConfig){
		"another filter": func(c *jetstream.ConsumerConfig) { c.FilterSubject = "toolbus.work.other" },
		"no filter":      func(c *jetstream.ConsumerConfig) { c.FilterSubject = "" },
		"several filters": func(c *jetstream.ConsumerConfig) {
			c.FilterSubject, c.FilterSubjects = "", []string{filter, "toolbus.work.other"}
		},
		"no acks":     func(c *jetstream.ConsumerConfig) { c.AckPolicy = jetstream.AckNonePolicy },
		"acks of all": func(c *jetstream.ConsumerConfig) { c.AckPolicy = jetstream.AckAllPolicy },
	} {
		c := ours
		mod(&c)
		if err := workConfig(c, filter); err == nil || !strings.Contains(err.Error(), "another config") {
			t.Errorf("%s: workConfig = %v, want another config", name, err)
		}
	}
}
