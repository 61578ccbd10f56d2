package offload

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// Store reads the outputs bucket from its stream's leader (a follower could
// answer "not found", protocol 5.9). Routers and operators only.
type Store struct {
	nc     *nats.Conn
	bucket string
	api    string // $JS.API.STREAM.MSG.GET.OBJ_<bucket>
	direct string // $JS.API.DIRECT.GET.OBJ_<bucket>
	// Ceiling is the most bytes Seal accepts in a worker's object (protocol
	// 5.9: the output ceiling); zero means DefaultMaxOutput.
	Ceiling int64
}

// NewStore reads bucket on nc.
func NewStore(nc *nats.Conn, bucket string) *Store {
	return &Store{nc: nc, bucket: bucket, api: "$JS.API.STREAM.MSG.GET.OBJ_" + bucket, direct: "$JS.API.DIRECT.GET.OBJ_" + bucket}
}

// ErrNotFound is an object that is not (or no longer) in the bucket.
var ErrNotFound = errors.New("no such object (it may have expired)")

// NotFoundRetry bounds how long a read retries "not found" before it
// believes it (a new leader may still be catching up).
const NotFoundRetry = 2 * time.Second

// requestTimeout bounds one API request whose context has no deadline.
const requestTimeout = 10 * time.Second

// Info is an object's metadata and the stream sequence of its metadata
// message (which changes whenever the object is replaced).
type Info struct {
	jetstream.ObjectInfo
	Seq uint64
}

// Header returns the object's header key ("" when absent).
func (i *Info) Header(key string) string { return nats.Header(i.Headers).Get(key) }

// MediaType is the object's Content-Type.
func (i *Info) MediaType() string { return i.Header("Content-Type") }

// Digest is the object's SHA-256 in hex ("" when its metadata has none).
func (i *Info) Digest() string { return hexDigest(i.ObjectInfo.Digest) }

// bounded is ctx bounded by requestTimeout when it has no deadline.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, requestTimeout)
}

// get asks the stream leader for one message; ErrNotFound when there is
// none.
func (s *Store) get(ctx context.Context, req store.MsgGetRequest) (*store.StreamMsg, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	m, err := store.MsgGet(ctx, s.nc, s.api, req)
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return m, nil
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("the outputs object store %s does not answer (no stream, or no leader): %w", s.bucket, err)
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, ErrNotFound
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("the outputs object store %s does not exist: %w", s.bucket, ErrNotFound)
	case errors.As(err, &apiErr):
		return nil, fmt.Errorf("reading %s: %s (%d)", s.bucket, apiErr.Description, apiErr.ErrorCode)
	}
	return nil, fmt.Errorf("reading %s: %w", s.bucket, err)
}

// chunkAt reads a chunk with DIRECT.GET (raw bytes, much faster): any
// replica's find is right, and on "not found" the leader is asked.
func (s *Store) chunkAt(ctx context.Context, req store.MsgGetRequest) (*store.StreamMsg, error) {
	body, _ := json.Marshal(req)
	rctx, cancel := bounded(ctx)
	m, err := s.nc.RequestWithContext(rctx, s.direct, body)
	cancel()
	if err == nil && m.Header.Get("Status") == "" {
		seq, perr := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if perr == nil {
			return &store.StreamMsg{Subject: m.Header.Get("Nats-Subject"), Sequence: seq, Data: m.Data}, nil
		}
	}
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return s.get(ctx, req) // not found here, or no direct get: the leader
}

// Info reads name's first metadata message (the writer's) from the leader,
// retrying "not found" for NotFoundRetry; else ErrNotFound. An object the
// layout refuses is an error wrapping errLayout, with its metadata.
func (s *Store) Info(ctx context.Context, name string) (*Info, error) {
	req := store.MsgGetRequest{Seq: 1, NextBySubject: metaSubject(s.bucket, name)}
	m, err := s.get(ctx, req)
	deadline := time.Now().Add(NotFoundRetry)
	for wait := 20 * time.Millisecond; errors.Is(err, ErrNotFound) && time.Now().Add(wait).Before(deadline); wait = min(2*wait, 250*time.Millisecond) {
		if err := bus.Sleep(ctx, wait); err != nil {
			return nil, err
		}
		m, err = s.get(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	var info Info
	if err := json.Unmarshal(m.Data, &info.ObjectInfo); err != nil {
		return nil, fmt.Errorf("object %s: bad metadata: %w", name, err)
	}
	if info.Deleted || info.Name != name {
		return nil, ErrNotFound
	}
	info.Seq = m.Sequence
	// Reading an object walks its chunks one stream read each: more than
	// its size needs in the layout's chunks is refused (session 38,
	// TestAttackTinyChunks: 1-byte chunks made a read of 20,000 bytes 20,000).
	if most := max(1, (info.Size+ChunkSize-1)/ChunkSize); uint64(info.Chunks) > most {
		return &info, fmt.Errorf("%w: object %s has %d chunks for %d bytes, more than its size needs in %d-byte chunks (protocol 5.9)", errLayout, name, info.Chunks, info.Size, ChunkSize)
	}
	return &info, nil
}

// errLayout is an object Info refuses; Info then returns its metadata too.
var errLayout = errors.New("refused")

// purge deletes refused object info by STREAM.PURGE (Delete writes a
// rollup, which the stream refuses): its metadata, then its chunks if their
// NUID is one token (128 random bits no other writer reads); else the TTL.
func (s *Store) purge(ctx context.Context, info *Info) {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return
	}
	st, err := js.Stream(ctx, "OBJ_"+s.bucket)
	if err != nil || st.Purge(ctx, jetstream.WithPurgeSubject(metaSubject(s.bucket, info.Name))) != nil {
		return
	}
	const alnum = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	if info.NUID != "" && strings.Trim(info.NUID, alnum) == "" {
		_ = st.Purge(ctx, jetstream.WithPurgeSubject(chunkSubject(s.bucket, info.NUID)))
	}
}

// chunk is where one chunk of a verified object is: its stream sequence,
// its offset in the object and its length.
type chunk struct {
	seq uint64
	off int64
	n   int
}

// walk reads every chunk in order, checking count, size and SHA-256 against
// want: errTampered on a mismatch, ErrNotFound on a missing chunk.
func (s *Store) walk(ctx context.Context, info *Info, want string) ([]chunk, error) {
	var chunks []chunk
	obj := NewObject(int64(info.Size), "", want, s.chunkReader(ctx, info, func(m *store.StreamMsg, off int64) {
		chunks = append(chunks, chunk{seq: m.Sequence, off: off, n: len(m.Data)})
	}))
	if _, err := io.Copy(io.Discard, obj); err != nil {
		return nil, err
	}
	return chunks, nil
}

// chunkReader is an Object's next for info's object: its chunks in order,
// each checked; seen is told each.
func (s *Store) chunkReader(ctx context.Context, info *Info, seen func(m *store.StreamMsg, off int64)) func(off int64) ([]byte, error) {
	subj := chunkSubject(s.bucket, info.NUID)
	seq, n := uint64(1), 0
	return func(off int64) ([]byte, error) {
		if n >= int(info.Chunks) {
			return nil, fmt.Errorf("%w: more than its %d chunks", errTampered, info.Chunks)
		}
		m, err := s.chunkAt(ctx, store.MsgGetRequest{Seq: seq, NextBySubject: subj})
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("object %s is incomplete (%d of %d bytes): %w", info.Name, off, info.Size, ErrNotFound)
		}
		if err != nil {
			return nil, err
		}
		if m.Subject != subj {
			return nil, fmt.Errorf("%w: the store returned a message of %s", errTampered, m.Subject)
		}
		seq, n = m.Sequence+1, n+1
		if seen != nil {
			seen(m, off)
		}
		return m.Data, nil
	}
}

// errTampered is an object whose bytes are not what its reference or its
// metadata say.
var errTampered = errors.New("the stored output does not match its digest")

// Object is a stored output opened for reading. Read checks the SHA-256 of
// what it read at the end: a corrupt, replaced or partly read object is an
// error, never silently short.
type Object struct {
	// Size is the object's length in bytes; MediaType its Content-Type;
	// Digest its SHA-256 in hex.
	Size      int64
	MediaType string
	Digest    string

	next func(off int64) ([]byte, error) // the bytes at off, at least one
	off  int64
	buf  []byte
	h    hash.Hash
	err  error
}

// NewObject is an Object whose bytes come from next, called with each offset
// until size bytes are read, which must hash to digest (SHA-256, hex).
func NewObject(size int64, media, digest string, next func(off int64) ([]byte, error)) *Object {
	return &Object{Size: size, MediaType: media, Digest: digest, next: next, h: sha256.New()}
}

func (o *Object) Read(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	for len(o.buf) == 0 {
		if o.off >= o.Size {
			if got := sumHex(o.h); got != o.Digest {
				o.err = fmt.Errorf("%w: the bytes read hash to sha256 %s, not %s", errTampered, got, o.Digest)
				return 0, o.err
			}
			o.err = io.EOF
			return 0, io.EOF
		}
		b, err := o.next(o.off)
		if err == nil && (len(b) == 0 || o.off+int64(len(b)) > o.Size) {
			err = fmt.Errorf("the store returned %d bytes at offset %d of %d", len(b), o.off, o.Size)
		}
		if err != nil {
			o.err = err
			return 0, err
		}
		o.h.Write(b)
		o.off += int64(len(b))
		o.buf = b
	}
	n := copy(p, o.buf)
	o.buf = o.buf[n:]
	return n, nil
}

// Close ends the read; further reads fail.
func (o *Object) Close() error {
	if o.err == nil {
		o.err = errors.New("the stored output is closed")
	}
	return nil
}

// Open opens the object ref names from the leader (`toolbus fetch
// --direct`); a digest in ref is checked at the end of the read.
func (s *Store) Open(ctx context.Context, ref string) (*Object, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if r.Bucket != s.bucket {
		s = NewStore(s.nc, r.Bucket)
	}
	info, err := s.Info(ctx, r.Name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	digest := info.Digest()
	if r.Digest != "" && digest != r.Digest {
		return nil, fmt.Errorf("%s: %w (the object was replaced after the reference was made)", ref, errTampered)
	}
	if digest == "" {
		return nil, fmt.Errorf("%s: the object's metadata has no SHA-256 digest", ref)
	}
	return NewObject(int64(info.Size), info.MediaType(), digest, s.chunkReader(ctx, info, nil)), nil
}
