package offload

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/store"
)

// The read verb of protocol 5.9: an agent asks a router on
// P.outputs.<session> for a window of a stored output of that session.
const (
	TypeGet   = "io.toolbus.output.get"
	TypeChunk = "io.toolbus.output.chunk"
)

// Get is the data of an io.toolbus.output.get: the reference (with its
// digest, as the result gave it), the offset of the first byte wanted and,
// optionally, at most how many bytes (the router caps it, MaxWindow).
type Get struct {
	URL    string `json:"url"`
	Offset int64  `json:"offset"`
	Max    int    `json:"max,omitempty"`
}

// Chunk is the data of an io.toolbus.output.chunk: the object's size,
// media type and digest, and its bytes from offset (base64 in JSON); the
// last window ends at size. An empty object has one window, empty.
type Chunk struct {
	URL       string `json:"url"`
	MediaType string `json:"media_type"`
	Size      int64  `json:"size"`
	Digest    string `json:"digest"`
	Offset    int64  `json:"offset"`
	Data      []byte `json:"data"`
}

// MaxWindow is the most bytes one chunk reply carries (base64: 2.7 MiB),
// less when the payload limit is smaller.
const MaxWindow = 2 << 20

// Window is the window a router serves under payload limit maxPayload:
// MaxWindow, or what fits base64-encoded with 16 KiB for the envelope.
func Window(maxPayload int64) int {
	return int(max(min(MaxWindow, (maxPayload-16<<10)*3/4), 1024))
}

// DecodeGet decodes an io.toolbus.output.get strictly: an unknown member,
// a missing url or a negative offset or max is a bad_request.
func DecodeGet(data []byte) (Get, error) {
	var g Get
	if err := bus.DecodeStrict(data, &g, "output.get's data", "output.get"); err != nil {
		return Get{}, err
	}
	if g.URL == "" {
		return Get{}, bus.Errorf(bus.CodeBadRequest, "output.get: url is required")
	}
	if g.Offset < 0 || g.Max < 0 {
		return Get{}, bus.Errorf(bus.CodeBadRequest, "output.get: offset and max must not be negative")
	}
	return g, nil
}

// Seal returns a copy of out whose references carry their objects' digests,
// accepting only objects of this store named "<key>." whose headers name
// this session and call and whose digest matches; the error names the block.
func (s *Store) Seal(ctx context.Context, key string, out []bus.Block) ([]bus.Block, error) {
	var res []bus.Block
	for i, b := range out {
		if b.Type != bus.BlockData || !strings.HasPrefix(b.URL, Scheme+":") {
			continue
		}
		sealed, err := s.seal(ctx, key, b)
		if err != nil {
			return nil, &BlockError{Index: i, Err: err}
		}
		if res == nil {
			res = append([]bus.Block(nil), out...)
		}
		res[i] = sealed
	}
	if res == nil {
		return out, nil
	}
	return res, nil
}

// BlockError is a refused reference: the index of its block and why.
type BlockError struct {
	Index int
	Err   error
}

func (e *BlockError) Error() string { return fmt.Sprintf("output block %d: %v", e.Index, e.Err) }
func (e *BlockError) Unwrap() error { return e.Err }

// ErrNotThisCall is a reference to an object that is not the call's own.
var ErrNotThisCall = errors.New("a stored output must be the call's own")

// Owned parses url, a reference of call key, refusing without a read one
// that names no object of bucket under "<key>." (Seal's first checks).
func Owned(bucket, key, url string) (Ref, error) {
	r, err := ParseRef(url)
	if err != nil {
		return r, err
	}
	if r.Bucket != bucket {
		return r, fmt.Errorf("%w: %s is not in the outputs object store %s", ErrNotThisCall, short(url), bucket)
	}
	if !strings.HasPrefix(r.Name, key+".") {
		return r, fmt.Errorf("%w: the name of %s does not start with the call's key %s.", ErrNotThisCall, short(url), key)
	}
	return r, nil
}

func (s *Store) seal(ctx context.Context, key string, b bus.Block) (bus.Block, error) {
	r, err := Owned(s.bucket, key, b.URL)
	if err != nil {
		return b, err
	}
	info, err := s.Info(ctx, r.Name)
	session, _, _ := strings.Cut(key, ".")
	ours := info != nil && info.Header(HeaderSession) == session && info.Header(HeaderCall) == key
	// Past the ceiling only the bucket's bound stopped a worker storing
	// gigabytes a call (TestAttack38bPastTheCeiling).
	if ceiling := cmp.Or(s.Ceiling, DefaultMaxOutput); err == nil && info.Size > uint64(ceiling) {
		err = fmt.Errorf("%w: object %s has %d bytes, more than the %d-byte output ceiling (protocol 5.9)", errLayout, r.Name, info.Size, ceiling)
	}
	switch {
	case errors.Is(err, ErrNotFound):
		return b, fmt.Errorf("%s: %w", short(b.URL), err)
	case errors.Is(err, errLayout) && ours:
		// The call's own, never sealed: nothing refers to it (protocol 5.9).
		s.purge(ctx, info)
		return b, err
	case err != nil:
		return b, err
	}
	if !ours {
		return b, fmt.Errorf("%w: the object %s was not stored for this call (its %s and %s headers must be %q and %q)",
			ErrNotThisCall, short(b.URL), HeaderSession, HeaderCall, session, key)
	}
	digest := info.Digest()
	if digest == "" {
		return b, fmt.Errorf("the object %s has no SHA-256 digest", short(b.URL))
	}
	if r.Digest != "" && r.Digest != digest {
		return b, fmt.Errorf("%w: the object %s was replaced after it was stored", errTampered, short(b.URL))
	}
	if b.Size != 0 && b.Size != int64(info.Size) {
		return b, fmt.Errorf("the block says %d bytes, the object %s has %d", b.Size, short(b.URL), info.Size)
	}
	r.Digest = digest
	b.URL, b.Size = r.String(), int64(info.Size)
	return b, nil
}

// Server answers the read verb for one outputs bucket, verifying an object
// whole once and serving later windows from its verified chunks. Safe for
// concurrent use.
type Server struct {
	st     *Store
	window int
	known  *lru.Cache[string, *verified] // by name#digest
	chunks atomic.Int64                  // of the objects known
	// first joins the reads of an object not known yet: one verification
	// (a read of the whole object) for reads sent at once.
	first singleflight.Group
}

// verified is an object whose bytes were checked against its digest.
type verified struct {
	session, media string
	size           int64
	chunks         []chunk
}

// serverCache and serverChunks bound the verified objects a Server
// remembers, by count and by their chunks' records (24 bytes each: 6 MiB,
// 32 GiB of outputs in 128 KiB chunks); the least recently used go first.
// An agent that cycles them has each read verify its object whole again,
// so a session needs more outputs than it may store to do so (512 objects
// of 1 MiB were enough before, docs/security.md).
const (
	serverCache  = 1 << 16
	serverChunks = 1 << 18
)

// NewServer serves st's objects in windows of at most window bytes.
func NewServer(st *Store, window int) *Server {
	sv := &Server{st: st, window: max(window, 1)}
	// a positive size never fails
	sv.known, _ = lru.NewWithEvict(serverCache, func(_ string, v *verified) { sv.chunks.Add(-int64(len(v.chunks))) })
	return sv
}

// Serve answers one read: the window from g.Offset of an object named
// "<session>." with that session's header and the required digest, else a
// *bus.Error (another session's is "no such output", as a missing one).
func (sv *Server) Serve(ctx context.Context, session string, g Get) (*Chunk, error) {
	r, err := ParseRef(g.URL)
	if err != nil {
		return nil, bus.Errorf(bus.CodeBadRequest, "%v", err)
	}
	if r.Bucket != sv.st.bucket {
		return nil, bus.Errorf(bus.CodeBadRequest, "only stored outputs of %s are served here, not of %s", sv.st.bucket, r.Bucket)
	}
	if r.Digest == "" {
		return nil, bus.Errorf(bus.CodeBadRequest, "reference %s has no #%s<digest>: give the url exactly as the result has it", short(g.URL), digestParam)
	}
	missing := bus.Errorf(bus.CodeBadRequest, "no output %s in session %s (it may have expired)", short(g.URL), session)
	if !strings.HasPrefix(r.Name, session+".") {
		return nil, missing
	}
	v, err := sv.object(ctx, r)
	if errors.Is(err, errTampered) {
		return nil, bus.Errorf(bus.CodeInternal, "the output %s was overwritten after its result (%v); it is not served", short(g.URL), err)
	}
	if errors.Is(err, ErrNotFound) {
		return nil, missing
	}
	if err != nil {
		return nil, bus.Errorf(bus.CodeInternal, "%v", err)
	}
	if v.session != session {
		return nil, missing
	}
	if g.Offset > v.size {
		return nil, bus.Errorf(bus.CodeBadRequest, "offset %d is past the end of the output (%d bytes)", g.Offset, v.size)
	}
	n := sv.window
	if g.Max > 0 {
		n = min(n, g.Max)
	}
	data, err := sv.read(ctx, v.chunks, g.Offset, n)
	if errors.Is(err, ErrNotFound) {
		return nil, missing // expired since
	}
	if err != nil {
		return nil, bus.Errorf(bus.CodeInternal, "reading %s: %v", short(g.URL), err)
	}
	return &Chunk{URL: g.URL, MediaType: v.media, Size: v.size, Digest: r.Digest, Offset: g.Offset, Data: data}, nil
}

// object returns the verified object r names: remembered, or read and
// checked against r's digest (metadata, then bytes; else errTampered).
func (sv *Server) object(ctx context.Context, r Ref) (*verified, error) {
	k := r.Name + "#" + r.Digest
	if v, ok := sv.known.Get(k); ok {
		return v, nil
	}
	v, err, _ := sv.first.Do(k, func() (any, error) {
		info, err := sv.st.Info(ctx, r.Name)
		if err != nil {
			return nil, err
		}
		if info.Digest() != r.Digest {
			return nil, fmt.Errorf("%w: its digest is no longer the recorded one", errTampered)
		}
		chunks, err := sv.st.walk(ctx, info, r.Digest)
		if err != nil {
			return nil, err
		}
		v := &verified{session: info.Header(HeaderSession), media: info.MediaType(), size: int64(info.Size), chunks: chunks}
		if ok, _ := sv.known.ContainsOrAdd(k, v); !ok {
			sv.chunks.Add(int64(len(chunks)))
			for sv.chunks.Load() > serverChunks && sv.known.Len() > 1 {
				sv.known.RemoveOldest()
			}
		}
		return v, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*verified), nil
}

// read returns up to n bytes from off of a verified object (fewer at its
// end), reading its chunks by sequence from the leader.
func (sv *Server) read(ctx context.Context, chunks []chunk, off int64, n int) ([]byte, error) {
	i := sort.Search(len(chunks), func(i int) bool { return chunks[i].off+int64(chunks[i].n) > off })
	out := make([]byte, 0, n)
	for ; i < len(chunks) && len(out) < n; i++ {
		c := chunks[i]
		m, err := sv.st.chunkAt(ctx, store.MsgGetRequest{Seq: c.seq})
		if err != nil {
			return nil, err
		}
		if len(m.Data) != c.n {
			return nil, fmt.Errorf("%w: chunk %d changed", errTampered, c.seq)
		}
		part := m.Data[int(max(off-c.off, 0)):]
		out = append(out, part[:min(len(part), n-len(out))]...)
	}
	return out, nil
}
