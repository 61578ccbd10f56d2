// Package offload stores the blocks that would make a message too large in
// the P_outputs object store and replaces them by references (protocol 5.9,
// docs/offload.md): Offloader writes, Store seals and reads, Server serves
// P.outputs.<session>.
package offload

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// Scheme is the URL scheme of a stored output's reference:
// nats-object://<bucket>/<object name>.
const Scheme = "nats-object"

const (
	// DefaultInlineLimit is the encoded size of an output above which its
	// largest blocks are stored, unless configured otherwise.
	DefaultInlineLimit = 1 << 20
	// DefaultMaxOutput is the encoded size of an output above which it is
	// refused, even by the object store, unless configured otherwise.
	DefaultMaxOutput = 64 << 20
	// Reserve is the part of the NATS payload limit never given to an
	// output: room for the envelope, the result's wrapping and metadata.
	Reserve = 64 << 10
	// PreviewBytes is how much of a stored text block stays inline for the
	// model (at most a quarter of the inline limit).
	PreviewBytes = 2048
	// PutTimeout bounds storing one output.
	PutTimeout = 2 * time.Minute
	// AckWait bounds the wait for one chunk's acknowledgement: a put whose
	// acknowledgements do not come (a store that stalls or drops them)
	// fails then and gives its room back, so it holds the window its
	// connection's puts share (PutWindow) that long, not PutTimeout.
	AckWait = 10 * time.Second
)

// TooLargeError is an output above the configured ceiling: it is neither
// sent nor stored.
type TooLargeError struct {
	Size, Max int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the output is %d bytes, more than the limit of %d bytes; it was neither sent nor stored", e.Size, e.Max)
}

// Limits are the sizes an Offloader works to.
type Limits struct {
	// Inline is the encoded output size above which blocks are stored;
	// zero means DefaultInlineLimit, capped by the payload limit less Reserve.
	Inline int
	// Max is the encoded output size above which an output is refused;
	// zero means DefaultMaxOutput.
	Max int64
}

// Offloader stores large blocks in one outputs bucket by publishing only, so
// a writer needs no JetStream API permission. Safe for concurrent use.
type Offloader struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	bucket string
	lim    Limits
	// room holds a token for every chunk published and not yet
	// acknowledged, by all the Offloader's puts together (PutWindow).
	room chan struct{}
}

// New returns an Offloader that stores in bucket (bus.Subjects.ObjectStore(bus.ObjectOutputs)).
func New(nc *nats.Conn, bucket string, lim Limits) (*Offloader, error) {
	lim.Inline = cmp.Or(max(lim.Inline, 0), DefaultInlineLimit)
	lim.Max = cmp.Or(max(lim.Max, 0), DefaultMaxOutput)
	o := &Offloader{nc: nc, bucket: bucket, lim: lim, room: make(chan struct{}, PutWindow/ChunkSize)}
	if nc != nil { // a nil connection (in tests) never stores anything
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(AckWait))
		if err != nil {
			return nil, fmt.Errorf("offload: %w", err)
		}
		o.js = js
	}
	return o, nil
}

// Inline is the largest encoded output sent inline beside extra bytes
// (metadata, a state patch): the inline limit, capped by the payload limit
// less Reserve and extra.
func (o *Offloader) Inline(extra int) int {
	if o.nc == nil {
		return o.lim.Inline
	}
	return max(min(o.lim.Inline, int(o.nc.MaxPayload())-Reserve-extra), 0)
}

// Size is the length of out's JSON encoding, counting text blocks twice when
// dup (an error result repeats its text in error.message).
func Size(out []bus.Block, dup bool) int64 {
	n := int64(2 + max(len(out)-1, 0)) // [] and the commas
	for _, b := range out {
		n += blockSize(b, dup)
	}
	return n
}

// Bound is an upper bound of Size without encoding: an escaped byte takes
// at most six, a block's names and punctuation less than 160 (160 more
// with annotations); every member counts (a resource link's description too).
func Bound(out []bus.Block, dup bool) int64 {
	n := int64(2)
	for _, b := range out {
		n += 160 + 6*int64(len(b.Type)+len(b.Text)+len(b.MediaType)+len(b.Data)+len(b.URL)+len(b.URI)+len(b.Name)+len(b.Title)+len(b.Description))
		if a := b.Annotations; a != nil {
			n += 160 + 6*int64(len(a.LastModified))
			for _, s := range a.Audience {
				n += 3 + 6*int64(len(s))
			}
		}
		if dup {
			n += 96 + 6*int64(len(b.Type)+len(b.Text))
		}
	}
	return n
}

func blockSize(b bus.Block, dup bool) int64 {
	enc, _ := b.MarshalJSON()
	n := int64(len(enc))
	if dup && b.Type == bus.BlockText {
		n += int64(len(enc)) // the text again, escaped (a little over: the block's members too)
	}
	return n
}

// Fit returns out unchanged when it fits inline beside extra bytes; else a
// copy whose largest blocks, until it fits, are stored under names starting
// with the call key and replaced by digest-carrying references (a text keeps
// a preview). dup marks results whose text the router repeats. Past the
// ceiling: *TooLargeError; a failed store is an error too.
func (o *Offloader) Fit(ctx context.Context, key string, out []bus.Block, extra int, dup bool) ([]bus.Block, error) {
	limit := int64(o.Inline(extra))
	if b := Bound(out, dup); b <= limit && b <= o.lim.Max {
		return out, nil // the usual small output: no encoding to measure it
	}
	sizes := make([]int64, len(out)) // each block encoded once: a 64 MiB text's encoding is most of a put's CPU
	size := int64(2 + max(len(out)-1, 0))
	for i, b := range out {
		sizes[i] = blockSize(b, dup)
		size += sizes[i]
	}
	if size > o.lim.Max {
		return nil, &TooLargeError{Size: size, Max: o.lim.Max}
	}
	if size <= limit {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PutTimeout)
	defer cancel()
	if o.js == nil {
		return nil, errors.New("no NATS connection to store the output on")
	}
	session, _, ok := strings.Cut(key, ".")
	if !ok || session == "" {
		return nil, fmt.Errorf("offload: key %q is not a call key (<session>.<replyid>.<callid>)", key)
	}
	w := writer{o: o, session: session, key: key}
	base := key + "." + randomToken()
	order := make([]int, len(out))
	blocks := make([][]bus.Block, len(out)) // out[i], or what replaces it
	for i := range out {
		order[i], blocks[i] = i, out[i:i+1]
	}
	sort.SliceStable(order, func(a, b int) bool { return sizes[order[a]] > sizes[order[b]] })
	for _, i := range order {
		if size <= limit {
			break
		}
		b := out[i]
		if b.Type != bus.BlockText && (b.Type != bus.BlockData || b.Data == "") {
			continue // a reference or an unknown block: nothing to store
		}
		repl, err := o.spill(ctx, w, base+"."+strconv.Itoa(i), b, int(min(limit/4, PreviewBytes)))
		if err != nil {
			return nil, fmt.Errorf("output[%d]: %w", i, err)
		}
		blocks[i] = repl
		size += Size(repl, dup) - 2 - sizes[i] // the commas between the new blocks are in Size
	}
	if size > limit {
		// Too many small blocks: keep the whole output as one JSON object.
		raw, err := bus.AppendBlocks(nil, out)
		if err != nil {
			return nil, err
		}
		ref, err := w.put(ctx, base+".all", "application/json", raw)
		if err != nil {
			return nil, err
		}
		return []bus.Block{{Type: bus.BlockText, Text: fmt.Sprintf("[The output, %d blocks, is too large to show here; it is stored as %s.]", len(out), ref.URL)}, ref}, nil
	}
	return slices.Concat(blocks...), nil
}

// spill stores one block and returns what replaces it.
func (o *Offloader) spill(ctx context.Context, w writer, name string, b bus.Block, keep int) ([]bus.Block, error) {
	if b.Type == bus.BlockText {
		ref, err := w.put(ctx, name, "text/plain; charset=utf-8", []byte(b.Text))
		if err != nil {
			return nil, err
		}
		return []bus.Block{{Type: bus.BlockText, Text: headTail(b.Text, keep, ref)}, ref}, nil
	}
	raw, err := base64.StdEncoding.DecodeString(b.Data)
	if err != nil {
		if raw, err = base64.RawStdEncoding.DecodeString(b.Data); err != nil {
			return nil, errors.New("a data block's data is not base64")
		}
	}
	ref, err := w.put(ctx, name, cmp.Or(b.MediaType, "application/octet-stream"), raw)
	if err != nil {
		return nil, err
	}
	ref.MediaType = b.MediaType
	return []bus.Block{ref}, nil
}

// headTail is what stays inline of a stored text: its head and tail (3/4 and
// 1/4 of keep) and a note on how to read the rest (read_output).
func headTail(s string, keep int, ref bus.Block) string {
	r, _ := ParseRef(ref.URL)
	keep = max(keep-len(ref.URL)-320, min(keep, 64)) // the note's room
	tailN := keep / 4
	head := preview(s, keep-tailN)
	head = strings.TrimSuffix(head, "…")
	tail := Suffix(s[len(head):], tailN)
	left := len(s) - len(head) - len(tail)
	return fmt.Sprintf("%s\n[… %d bytes left out …]\n%s\n[The whole text, %d bytes (sha256 %s), is too large to show here: "+
		"above are its first %d and last %d bytes. It is stored as %s; read_output reads any part of it.]",
		head, left, tail, len(s), r.Digest, len(head), len(tail), ref.URL)
}

// Suffix is the end of s, at most n bytes, cut at a rune (a model-facing tail).
func Suffix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// preview is the beginning of s, at most n bytes, cut at a rune.
func preview(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Ref is a parsed reference to a stored output (protocol 5.9):
// nats-object://<bucket>/<name>#sha256=<hex>.
type Ref struct {
	Bucket string
	Name   string
	// Digest is the SHA-256 of the object's bytes as 64 lower-case hex
	// digits; "" when the reference carries none (not a sealed result's).
	Digest string
}

// MaxRefLen bounds a reference's length: a toolbus name is at most about
// 420 bytes (three 128-byte ids, 32 hex digits, an index).
const MaxRefLen = 2048

// digestParam starts a reference's fragment: #sha256=<hex>, as package
// indexes write a download's digest (pip's #sha256=).
const digestParam = "sha256="

var (
	validBucket = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	validHex    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// String is the reference as a URL; the name is path-escaped (a literal
// '#' in a name becomes %23, so the first '#' always starts the digest).
func (r Ref) String() string {
	s := Scheme + "://" + r.Bucket + "/" + url.PathEscape(r.Name)
	if r.Digest != "" {
		s += "#" + digestParam + r.Digest
	}
	return s
}

// Session is the first dot-separated token of the name: the session a
// toolbus name starts with (a hint for whom to ask; never proof of owner).
func (r Ref) Session() string {
	s, _, _ := strings.Cut(r.Name, ".")
	return s
}

// ParseRef parses a reference, refusing anything else with a readable error.
func ParseRef(ref string) (Ref, error) {
	if len(ref) > MaxRefLen {
		return Ref{}, fmt.Errorf("reference %q is longer than %d bytes", short(ref), MaxRefLen)
	}
	rest, ok := strings.CutPrefix(ref, Scheme+"://")
	if !ok {
		return Ref{}, fmt.Errorf("reference %q is not a %s:// URL", short(ref), Scheme)
	}
	rest, frag, hasFrag := strings.Cut(rest, "#")
	bucket, name, ok := strings.Cut(rest, "/")
	if !ok || !validBucket.MatchString(bucket) {
		return Ref{}, fmt.Errorf("reference %q does not name a bucket (%s://<bucket>/<name>)", short(ref), Scheme)
	}
	name, err := url.PathUnescape(name)
	if err != nil || name == "" {
		return Ref{}, fmt.Errorf("reference %q does not name an object (%s://<bucket>/<name>)", short(ref), Scheme)
	}
	r := Ref{Bucket: bucket, Name: name}
	if hasFrag {
		d, ok := strings.CutPrefix(frag, digestParam)
		if !ok || !validHex.MatchString(d) {
			return Ref{}, fmt.Errorf("reference %q: the part after '#' must be %s<64 lower-case hex digits>", short(ref), digestParam)
		}
		r.Digest = d
	}
	return r, nil
}

// short is s cut for an error message.
func short(s string) string { return preview(s, 200) }

// randomToken is 128 random bits as 32 hex digits, for names nobody guesses.
func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand.Read)
	return hex.EncodeToString(b[:])
}

// metaDigest is the object store's digest value (SHA-256=<base64url>) of
// a hex digest, and hexDigest the reverse ("" when it is not SHA-256).
func metaDigest(hexd string) string {
	b, err := hex.DecodeString(hexd)
	if err != nil {
		return ""
	}
	return "SHA-256=" + base64.URLEncoding.EncodeToString(b)
}

func hexDigest(meta string) string {
	v, ok := strings.CutPrefix(meta, "SHA-256=")
	if !ok {
		return ""
	}
	b, err := base64.URLEncoding.DecodeString(v)
	if err != nil {
		if b, err = base64.RawURLEncoding.DecodeString(v); err != nil {
			return ""
		}
	}
	if len(b) != sha256.Size {
		return ""
	}
	return hex.EncodeToString(b)
}

func sumHex(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// The headers binding a stored output to its session and call (protocol 5.9).
const (
	HeaderSession = "Toolbus-Session"
	HeaderCall    = "Toolbus-Call"
)

// ChunkSize is the size of every chunk but the last of an object toolbus
// stores (the object store's default).
const ChunkSize = 128 << 10

// PutWindow is how many bytes of chunks one Offloader (one connection) has
// published ahead of their acknowledgements, all its puts together: what a
// heartbeat or a reply sent meanwhile may queue behind, and all the chunks
// it holds in flight (docs/offload.md, paced writes).
const PutWindow = 1 << 20

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

// put publishes data's chunks then its metadata (expecting subject sequence
// 0: never replacing an object) and returns its reference block.
func (w writer) put(ctx context.Context, name, media string, data []byte) (bus.Block, error) {
	o := w.o
	token := randomToken()
	subj := chunkSubject(o.bucket, token)
	h := sha256.New()
	fl := flight{o: o}
	defer fl.end()
	chunks := 0
	for off := 0; off < len(data); off += ChunkSize {
		part := data[off:min(off+ChunkSize, len(data))]
		h.Write(part)
		if err := fl.send(ctx, &nats.Msg{Subject: subj, Data: part}); err != nil {
			return bus.Block{}, o.putError(len(data), err)
		}
		chunks++
	}
	if err := fl.wait(ctx); err != nil { // every chunk stored before the metadata names them
		return bus.Block{}, o.putError(len(data), err)
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
	m := nats.NewMsg(metaSubject(o.bucket, name)) // no Nats-Rollup: the store refuses rollups
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	m.Data = raw
	if err = fl.send(ctx, m); err == nil {
		err = fl.wait(ctx)
	}
	if err != nil {
		return bus.Block{}, o.putError(len(data), err)
	}
	ref := Ref{Bucket: o.bucket, Name: name, Digest: digest}
	return bus.Block{Type: bus.BlockData, MediaType: media, URL: ref.String(), Size: int64(len(data))}, nil
}

// flight is one put's publishes not yet acknowledged, each holding room
// in its Offloader's window.
type flight struct {
	o       *Offloader
	pending []jetstream.PubAckFuture
}

// send publishes m once the window has room. While it waits, the put's own
// acknowledgements give their room back, so puts sharing the window never
// wait for each other's unread acknowledgements.
func (f *flight) send(ctx context.Context, m *nats.Msg) error {
	for {
		var ok <-chan *jetstream.PubAck
		var failed <-chan error
		if len(f.pending) > 0 {
			ok, failed = f.pending[0].Ok(), f.pending[0].Err()
		}
		select {
		case f.o.room <- struct{}{}:
			p, err := f.o.js.PublishMsgAsync(m)
			if err != nil {
				<-f.o.room
				return err
			}
			f.pending = append(f.pending, p)
			return nil
		case <-ok:
			f.acked()
		case err := <-failed:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// wait waits for every acknowledgement, in order.
func (f *flight) wait(ctx context.Context) error {
	for len(f.pending) > 0 {
		select {
		case <-f.pending[0].Ok():
			f.acked()
		case err := <-f.pending[0].Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (f *flight) acked() {
	f.pending = f.pending[1:]
	<-f.o.room
}

// end gives back the room of the publishes a failed put leaves
// unacknowledged: their bytes are the connection's already.
func (f *flight) end() {
	for range f.pending {
		<-f.o.room
	}
	f.pending = nil
}

func (o *Offloader) putError(n int, err error) error {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("the outputs object store %s does not exist (a router creates it at start): %w", o.bucket, err)
	}
	return fmt.Errorf("storing %d bytes in %s: %w", n, o.bucket, err)
}
