package store

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The compare-and-set writes of a bucket (Create, Update), the router's hot
// path: KV sends jetstream's message itself and reads a plain
// acknowledgement by hand (docs/store.md); any other outcome goes to
// jetstream's own method, which writes again (refused again the same way).

// Update writes value to key if its latest revision is revision.
func (k *KV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	return UpdateWithin(ctx, k, Key{Name: key}, value, revision, 0)
}

// Create writes value to key if it does not exist.
func (k *KV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if len(opts) > 0 {
		return k.KeyValue.Create(ctx, key, value, opts...)
	}
	return CreateWithin(ctx, k, Key{Name: key}, value, 0)
}

// Key is a key of a bucket with the subject its writes are sent to, made
// once with KeyOf by a caller that writes one key more than once; a
// Key{Name: key} makes it per write.
type Key struct {
	Name    string
	subject string // "$KV.<bucket>.<Name>", or "": made per write (or the write is jetstream's)
}

// KeyOf is key in kv, with its subject when kv sends its writes itself.
func KeyOf(kv jetstream.KeyValue, key string) Key {
	if k, ok := kv.(*KV); ok && k.cas && plainKey(key) {
		return Key{Name: key, subject: k.prefix + key}
	}
	return Key{Name: key}
}

// UpdateWithin is kv.Update bounded by within as well as ctx (zero: ctx
// alone), without a context of its own unless the write goes to jetstream.
func UpdateWithin(ctx context.Context, kv jetstream.KeyValue, key Key, value []byte, revision uint64, within time.Duration) (uint64, error) {
	return casWithin(ctx, kv, key, value, revision, false, within, false)
}

// UpdateDetached is UpdateWithin(context.WithoutCancel(ctx), ...), without
// making that context unless the write goes to jetstream.
func UpdateDetached(ctx context.Context, kv jetstream.KeyValue, key Key, value []byte, revision uint64, within time.Duration) (uint64, error) {
	return casWithin(ctx, kv, key, value, revision, false, within, true)
}

// CreateWithin is kv.Create bounded as UpdateWithin.
func CreateWithin(ctx context.Context, kv jetstream.KeyValue, key Key, value []byte, within time.Duration) (uint64, error) {
	return casWithin(ctx, kv, key, value, 0, true, within, false)
}

func casWithin(ctx context.Context, kv jetstream.KeyValue, key Key, value []byte, revision uint64, create bool, within time.Duration, detached bool) (uint64, error) {
	start := time.Now()
	if k, ok := kv.(*KV); ok {
		if rev, ok := k.casWrite(ctx, key, value, revision, within, detached); ok {
			return rev, nil
		}
		kv = k.KeyValue
	}
	if detached {
		ctx = context.WithoutCancel(ctx)
	}
	if within > 0 { // a bound that passed fails jetstream's write at once
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, start.Add(within))
		defer cancel()
	}
	if create {
		return kv.Create(ctx, key.Name, value)
	}
	return kv.Update(ctx, key.Name, value, revision)
}

// casMsgs are writes in flight, pooled: nats.go keeps nothing of a message
// once it is sent. A header holds its one key for good, its value a view
// of num while the message is sent.
var casMsgs = sync.Pool{New: func() any {
	cm := &casMsg{h: nats.Header{}}
	cm.h[jetstream.ExpectedLastSubjSeqHeader] = cm.val[:]
	return cm
}}

type casMsg struct {
	m   nats.Msg
	h   nats.Header
	val [1]string
	num [20]byte // a uint64's decimal digits
}

// casWrite writes value to key at revision (0: the key must not exist) and
// reports the new revision; ok is false for any outcome but a plain
// acknowledgement. It waits until ctx ends (unless detached) or within.
func (k *KV) casWrite(ctx context.Context, key Key, value []byte, revision uint64, within time.Duration, detached bool) (uint64, bool) {
	var done <-chan struct{}
	switch {
	case k.nc == nil || key.subject == "" && (!k.cas || !plainKey(key.Name)):
		return 0, false
	case detached && within <= 0:
		return 0, false // unbounded: jetstream's write, with its timeout
	case !detached:
		if ctx.Err() != nil {
			return 0, false
		}
		done = ctx.Done()
	}
	subject := key.subject
	if subject == "" {
		subject = k.prefix + key.Name
	}
	w, err := k.acks.Await(0)
	if err != nil {
		return 0, false
	}
	var resp *nats.Msg
	defer func() { k.acks.Done(w, resp != nil) }()
	cm := casMsgs.Get().(*casMsg)
	digits := strconv.AppendUint(cm.num[:0], revision, 10)
	cm.val[0] = unsafe.String(unsafe.SliceData(digits), len(digits))
	cm.m = nats.Msg{Subject: subject, Reply: w.Inbox(), Header: cm.h, Data: value}
	err = k.nc.PublishMsg(&cm.m)
	cm.m = nats.Msg{}
	cm.val[0] = ""
	casMsgs.Put(cm)
	if err != nil {
		return 0, false
	}
	if resp = w.WaitDone(done, within); resp == nil {
		return 0, false
	}
	return pubAckSeq(resp.Data)
}

// plainKey reports whether key is one jetstream's kvs accepts (it matches
// ^[-/_=\.a-zA-Z0-9]+$ and neither starts nor ends with a dot).
func plainKey(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '/' || c == '_' || c == '=' || c == '.') {
			return false
		}
	}
	return true
}

// pubAckSeq reads the sequence of a JetStream publish acknowledgement,
// {"stream":"KV_x","seq":n[,...]}: the stream member first, no error
// member, seq a plain decimal number.
func pubAckSeq(b []byte) (uint64, bool) {
	if !bytes.HasPrefix(b, []byte(`{"stream":"`)) || bytes.Contains(b, []byte(`"error"`)) {
		return 0, false
	}
	_, after, ok := bytes.Cut(b, []byte(`,"seq":`))
	if !ok {
		return 0, false
	}
	n := 0
	for n < len(after) && after[n] >= '0' && after[n] <= '9' {
		n++
	}
	if n == 0 || n >= len(after) || (after[n] != ',' && after[n] != '}') {
		return 0, false
	}
	seq, err := strconv.ParseUint(string(after[:n]), 10, 64)
	if err != nil || seq == 0 {
		return 0, false
	}
	return seq, true
}
