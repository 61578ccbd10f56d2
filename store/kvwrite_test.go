package store

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/testkit"
)

func TestPubAckSeq(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{`{"stream":"KV_P_ledger","seq":5}`, 5, true},
		{`{"stream":"KV_P_ledger","domain":"hub","seq":18446744073709551615}`, 18446744073709551615, true},
		{`{"stream":"KV_x","seq":7,"duplicate":true}`, 7, true},
		{`{"stream":"KV_x","seq":0}`, 0, false},
		{`{"stream":"KV_x","seq":18446744073709551616}`, 0, false}, // overflows
		{`{"stream":"KV_x","seq":-1}`, 0, false},
		{`{"stream":"KV_x","seq":1.5}`, 0, false},
		{`{"stream":"KV_x","seq":12`, 0, false},
		{`{"stream":"KV_x"}`, 0, false},
		{`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 4"},"stream":"KV_x","seq":0}`, 0, false},
		{`{"stream":"KV_x","error":{"code":503},"seq":3}`, 0, false},
		{`{"seq":3,"stream":"KV_x"}`, 0, false}, // not the server's order: jetstream decides
		{``, 0, false},
		{`null`, 0, false},
	} {
		got, ok := pubAckSeq([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("pubAckSeq(%s) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// plainKey accepts exactly the keys jetstream's kvs accepts.
func TestPlainKeyIsJetStreams(t *testing.T) {
	re := regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)
	valid := func(k string) bool { return k != "" && k[0] != '.' && k[len(k)-1] != '.' && re.MatchString(k) }
	for _, k := range []string{"", ".", "a", "a.b", ".a", "a.", "s1.r1.c1", "a b", "a*", "a>", "ü", "a/b=c_d-e", "a\x00", "A.Z.0.9"} {
		if plainKey(k) != valid(k) {
			t.Errorf("plainKey(%q) = %v, jetstream says %v", k, plainKey(k), valid(k))
		}
	}
}

// FuzzPlainKey holds plainKey to jetstream's rule on any key.
func FuzzPlainKey(f *testing.F) {
	re := regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)
	for _, k := range []string{"a.b", ".a", "a*", "s1.r1.c1"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		want := k != "" && k[0] != '.' && k[len(k)-1] != '.' && re.MatchString(k)
		if plainKey(k) != want {
			t.Errorf("plainKey(%q) = %v, jetstream says %v", k, plainKey(k), want)
		}
	})
}

// KV's Create and Update answer as the bucket's own methods do: the same
// revisions, the same refusals (a conflict, an invalid key), and a create
// of a deleted key succeeds.
func TestCASWritesAreJetStreams(t *testing.T) {
	kv, raw := newBucket(t, "cas")
	ctx := t.Context()
	if !kv.cas {
		t.Fatal("the fast path is off on a plain deployment")
	}
	rev, err := kv.Create(ctx, "k", []byte("1"))
	if err != nil || rev != 1 {
		t.Fatalf("create: %d, %v", rev, err)
	}
	if _, err := kv.Create(ctx, "k", []byte("2")); !IsConflict(err) || !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("create of an existing key: %v, want jetstream's key exists", err)
	}
	if _, err := kv.Update(ctx, "k", []byte("2"), 7); !IsConflict(err) {
		t.Fatalf("update at a stale revision: %v, want a conflict", err)
	}
	if rev, err = kv.Update(ctx, "k", []byte("2"), 1); err != nil || rev != 2 {
		t.Fatalf("update: %d, %v", rev, err)
	}
	e, err := raw.Get(ctx, "k")
	if err != nil || string(e.Value()) != "2" || e.Revision() != 2 {
		t.Fatalf("stored %v, %v", e, err)
	}
	if _, err := kv.Update(ctx, "bad key", []byte("x"), 0); !errors.Is(err, jetstream.ErrInvalidKey) {
		t.Fatalf("invalid key: %v, want jetstream's ErrInvalidKey", err)
	}
	if err := kv.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if rev, err = kv.Create(ctx, "k", []byte("3")); err != nil || rev != 4 { // over the delete marker, jetstream's way
		t.Fatalf("create of a deleted key: %d, %v", rev, err)
	}
	if rev, err = kv.Update(ctx, "n", []byte("x"), 0); err != nil || rev != 5 { // revision 0: must not exist
		t.Fatalf("update of an absent key at 0: %d, %v", rev, err)
	}
}

// A Key made once (KeyOf) writes as a key named per write does; a key
// jetstream refuses gets no subject and is refused as before; a detached
// update lands under a context that has ended, and a bounded one does not
// start under it.
func TestKeyOfAndDetached(t *testing.T) {
	kv, raw := newBucket(t, "keyed")
	ctx := t.Context()
	k := KeyOf(kv, "s.r.c")
	if k.Name != "s.r.c" || k.subject != "$KV.keyed.s.r.c" {
		t.Fatalf("KeyOf: %+v", k)
	}
	if bad := KeyOf(kv, "a b"); bad.subject != "" {
		t.Fatalf("a key jetstream refuses has a subject: %+v", bad)
	}
	if k := KeyOf(raw, "s.r.c"); k.subject != "" {
		t.Fatalf("a bucket that is not a KV's has a subject: %+v", k)
	}
	rev, err := CreateWithin(ctx, kv, k, []byte("1"), time.Second)
	if err != nil || rev != 1 {
		t.Fatalf("create: %d, %v", rev, err)
	}
	if _, err := CreateWithin(ctx, kv, KeyOf(kv, "a b"), []byte("1"), time.Second); !errors.Is(err, jetstream.ErrInvalidKey) {
		t.Fatalf("invalid key: %v, want jetstream's ErrInvalidKey", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := UpdateWithin(ended, kv, k, []byte("x"), rev, time.Second); err == nil {
		t.Fatal("an update under an ended context was written")
	}
	if rev, err = UpdateDetached(ended, kv, k, []byte("2"), rev, time.Second); err != nil || rev != 2 {
		t.Fatalf("detached update under an ended context: %d, %v", rev, err)
	}
	if _, err := UpdateDetached(ended, kv, k, []byte("3"), 1, time.Second); !IsConflict(err) {
		t.Fatalf("detached update at a stale revision: %v, want a conflict", err)
	}
	if rev, err = UpdateDetached(ended, kv, k, []byte("3"), rev, 0); err != nil || rev != 3 { // unbounded: jetstream's, detached too
		t.Fatalf("detached update without a bound: %d, %v", rev, err)
	}
	e, err := raw.Get(ctx, "s.r.c")
	if err != nil || string(e.Value()) != "3" || e.Revision() != 3 {
		t.Fatalf("stored %v, %v", e, err)
	}
	// Revisions of many digits, each header written over the last one's
	// (the pooled message's header is a view of its digits).
	for want := rev + 1; want <= 1234; want++ {
		if rev, err = UpdateWithin(ctx, kv, k, []byte("n"), rev, time.Second); err != nil || rev != want {
			t.Fatalf("update to %d: %d, %v", want, rev, err)
		}
	}
	if _, err := UpdateWithin(ctx, kv, k, []byte("x"), 1233, time.Second); !IsConflict(err) {
		t.Fatalf("update at a stale revision of four digits: %v, want a conflict", err)
	}
	if _, err := UpdateWithin(ctx, kv, k, []byte("x"), 12340, time.Second); !IsConflict(err) {
		t.Fatalf("update at a revision to come: %v, want a conflict", err)
	}
}

// newBucket is a KV over a new bucket of one server, and the bucket as
// jetstream gives it.
func newBucket(t *testing.T, name string) (*KV, jetstream.KeyValue) {
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	raw, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: name, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	return NewKV(js, raw, 1), raw
}
