package offload

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// The headers that bind a stored output to its call (protocol 5.9): the
// session and the call key (<session>.<replyid>.<callid>). A router
// accepts a result's reference only when they name that call, and serves
// an object on P.outputs.<session> only when Toolbus-Session names that
// session.
const (
	HeaderSession = "Toolbus-Session"
	HeaderCall    = "Toolbus-Call"
)

// ChunkSize is the size of every chunk but the last of an object toolbus
// stores (the object store's default).
const ChunkSize = 128 << 10

// window is how many chunks may be published ahead of their
// acknowledgements: at most 256 KiB queue in the writer's connection
// ahead of its heartbeats and replies (docs/offload.md, paced writes).
const window = 2

// Subjects of an object store bucket (the layout of nats.go's object
// store, so any client reads what toolbus writes).
func chunkSubject(bucket, token string) string { return "$O." + bucket + ".C." + token }
func metaSubject(bucket, name string) string {
	return "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// writer stores the objects of one call.
type writer struct {
	o            *Offloader
	session, key string
}

// put stores data under name, by publishing its chunks then its metadata
// to the bucket's subjects, and returns its reference block (with the
// digest). It makes no JetStream API request: a writer needs only publish
// permission on $O.<bucket>.C.> and $O.<bucket>.M.>. The metadata is
// published with Nats-Expected-Last-Subject-Sequence 0, so an honest
// writer never replaces an existing object, and it is the first message
// on its subject, the one Store.Info reads.
func (w writer) put(ctx context.Context, name, media string, data []byte) (bus.Block, error) {
	o := w.o
	token := randomToken()
	subj := chunkSubject(o.bucket, token)
	h := sha256.New()
	var pending []jetstream.PubAckFuture
	chunks := 0
	for off := 0; off < len(data); off += ChunkSize {
		part := data[off:min(off+ChunkSize, len(data))]
		h.Write(part)
		f, err := o.js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: part})
		if err != nil {
			return bus.Block{}, o.putError(len(data), err)
		}
		chunks++
		if pending = append(pending, f); len(pending) >= window {
			if err := await(ctx, pending[0]); err != nil {
				return bus.Block{}, o.putError(len(data), err)
			}
			pending = pending[1:]
		}
	}
	for _, f := range pending {
		if err := await(ctx, f); err != nil {
			return bus.Block{}, o.putError(len(data), err)
		}
	}
	digest := sumHex(h)
	info := jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Description: "toolbus output",
			Headers: nats.Header{"Content-Type": []string{media}, HeaderSession: []string{w.session}, HeaderCall: []string{w.key}},
			Opts:    &jetstream.ObjectMetaOptions{ChunkSize: ChunkSize}},
		Bucket: o.bucket, NUID: token, Size: uint64(len(data)), Chunks: uint32(chunks), Digest: metaDigest(digest),
	}
	raw, err := json.Marshal(info)
	if err != nil {
		return bus.Block{}, err
	}
	// No Nats-Rollup header (nats.go's Put sends one to replace an older
	// version): the name is new, and a store that refuses rollups
	// (deny_purge) then keeps every write.
	m := nats.NewMsg(metaSubject(o.bucket, name))
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	m.Data = raw
	f, err := o.js.PublishMsgAsync(m)
	if err == nil {
		err = await(ctx, f)
	}
	if err != nil {
		return bus.Block{}, o.putError(len(data), err)
	}
	ref := Ref{Bucket: o.bucket, Name: name, Digest: digest}
	return bus.Block{Type: bus.BlockData, MediaType: media, URL: ref.String(), Size: int64(len(data))}, nil
}

// await waits for one publish's acknowledgement.
func await(ctx context.Context, f jetstream.PubAckFuture) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (o *Offloader) putError(n int, err error) error {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("the outputs object store %s does not exist (a router creates it at start): %w", o.bucket, err)
	}
	return fmt.Errorf("storing %d bytes in %s: %w", n, o.bucket, err)
}
