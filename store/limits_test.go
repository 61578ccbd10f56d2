package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestRetentionConfig checks that the events stream's retention and the
// outputs object store follow store.Config, with the documented defaults,
// and that a second Setup with new values updates them in place.
func TestRetentionConfig(t *testing.T) {
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	js := testkit.JetStream(t, nc)
	check := func(st *store.Store, age time.Duration, bytes int64, outTTL time.Duration, outBytes int64) {
		t.Helper()
		info, err := st.Events.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.MaxAge != age || info.Config.MaxBytes != bytes {
			t.Errorf("events max age %v, max bytes %d; want %v, %d", info.Config.MaxAge, info.Config.MaxBytes, age, bytes)
		}
		status, err := st.Outputs.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		si := status.(*jetstream.ObjectBucketStatus).StreamInfo()
		if status.Bucket() != "lim_outputs" || status.TTL() != outTTL || si.Config.MaxBytes != outBytes {
			t.Errorf("outputs %s TTL %v max bytes %d; want %v, %d", status.Bucket(), status.TTL(), si.Config.MaxBytes, outTTL, outBytes)
		}
		// Without a byte bound, the default bound by messages (1.23).
		wantMsgs := int64(store.DefaultOutputsMaxMsgs)
		if outBytes > 0 {
			wantMsgs = -1
		}
		if si.Config.MaxMsgs != wantMsgs || si.Config.MaxMsgSize != store.OutputsMaxMsgSize || si.Config.Discard != jetstream.DiscardNew {
			t.Errorf("outputs max msgs %d, max msg size %d, discard %v", si.Config.MaxMsgs, si.Config.MaxMsgSize, si.Config.Discard)
		}
	}
	subj := bus.NewSubjects("lim")
	st, err := store.Setup(t.Context(), js, subj, store.Config{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	check(st, bus.DefaultEventsMaxAge, store.DefaultEventsMaxBytes, bus.DefaultOutputsTTL, -1)
	st, err = store.Setup(t.Context(), js, subj, store.Config{Memory: true, EventsMaxAge: time.Hour, EventsMaxBytes: 1 << 20,
		OutputsTTL: 2 * time.Hour, OutputsMaxBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	check(st, time.Hour, 1<<20, 2*time.Hour, 8<<20)
}

// TestOutputsReplicated: on the 3-node cluster the outputs bucket has the
// deployment's replicas.
func TestOutputsReplicated(t *testing.T) {
	c := testkit.RunCluster(t)
	nc := testkit.ConnectURL(t, c.URLs(0))
	js := testkit.JetStream(t, nc)
	st, err := store.Setup(t.Context(), js, bus.NewSubjects("rep"), store.Config{Replicas: 3, OutputsMaxBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	status, err := st.Outputs.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if status.Replicas() != 3 {
		t.Errorf("outputs replicas %d", status.Replicas())
	}
}

// TestBoundUpgradeKeepsWrites: a bucket that already holds more than its
// new hard bound (one of a router before 1.24, or a bound made smaller)
// gets a max_bytes above what it holds, so its keys are still written
// (an answer, a cancel); only new keys are refused, by the soft bound.
func TestBoundUpgradeKeepsWrites(t *testing.T) {
	s := testkit.RunServer(t)
	js := testkit.JetStream(t, testkit.Connect(t, s))
	subj := bus.NewSubjects("up")
	st, err := store.Setup(t.Context(), js, subj, store.Config{Memory: true, ParkedMaxBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 128<<10)
	for i := range 160 { // 20 MiB, past a 1 MiB soft bound's hard one (17 MiB)
		if _, err := st.Parked.Put(t.Context(), fmt.Sprintf("k%d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	if st, err = store.Setup(t.Context(), js, subj, store.Config{Memory: true, ParkedMaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	info, err := st.ParkedStream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if held := int64(info.State.Bytes); info.Config.MaxBytes < held+store.BoundMargin {
		t.Fatalf("max_bytes %d below what the bucket holds (%d) plus the margin", info.Config.MaxBytes, held)
	}
	if _, err := st.Parked.Put(t.Context(), "k7", value[:1<<10]); err != nil {
		t.Fatalf("a held key's write after the upgrade: %v", err)
	}
	if store.BoundOf(st.Parked).Room(t.Context(), 100) {
		t.Fatal("a new key had room past the soft bound")
	}
}
