package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// What a bridged server may send is bounded (docs/protocol.md 12, 13): a
// hostile or broken server must not fill the events stream, the tool
// listings or the worker's memory.
const (
	// DefaultMaxMessage is the largest JSON-RPC message the bridge reads from
	// a server (a stdio line, an HTTP body, an SSE event), refused while it
	// streams.
	DefaultMaxMessage = 16 << 20
	// MaxDescription and MaxTitle bound a bridged tool's description and
	// title, in bytes; longer ones are cut, saying so.
	MaxDescription = 8 << 10
	MaxTitle       = 256
	// MaxTools bounds the tools bridged from one server: its listing's
	// first ones (after enable_tools and disable_tools); the rest are left
	// out, logged. Every session lists a bridged tool, and its definition
	// stays in the catalogue (docs/security.md, TestAttackServerListsManyTools).
	MaxTools = 256
	// refreshEvery is the least time between two listings of a server's
	// tools: its list_changed notices in between are one (each may replace
	// the server's worker and rewrite up to MaxTools definitions,
	// TestAttackServerChurnsTools).
	refreshEvery = time.Second
	// progressEvery is the least time between two progress events of one
	// call: notices in between are coalesced, the latest one wins.
	progressEvery = 250 * time.Millisecond
	// maxProgressText bounds one progress event's text, in bytes.
	maxProgressText = 1 << 10
	// headBytes is how much of a line the stdio limiter keeps to find the
	// id of a message it cuts.
	headBytes = 4 << 10
)

// cut returns s cut to at most limit bytes (whole runes), saying so.
func cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	note := fmt.Sprintf(" […cut: %d bytes]", len(s))
	keep := limit - len(note)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:max(keep, 0)] + note
}

func tooLarge(limit int64) error {
	return fmt.Errorf("the MCP server's message exceeds the bridge's limit of %d bytes; refused", limit)
}

// progressGate coalesces one call's progress: the first notice is sent at
// once, later ones at most every progressEvery, the latest one winning;
// what is pending when the call ends is dropped (its result follows).
type progressGate struct {
	send  func(text string)
	every time.Duration

	sendMu sync.Mutex // keeps sends in order

	mu      sync.Mutex
	last    time.Time
	pending string      // the latest notice, until it is sent
	timer   *time.Timer // set while a notice is pending
	closed  bool
}

func newProgressGate(every time.Duration, send func(string)) *progressGate {
	return &progressGate{send: send, every: every}
}

func (g *progressGate) offer(text string) {
	g.mu.Lock()
	g.pending = cut(text, maxProgressText)
	switch wait := g.every - time.Since(g.last); {
	case g.closed || g.timer != nil: // dropped, or the timer sends it
		g.mu.Unlock()
	case wait > 0:
		g.timer = time.AfterFunc(wait, g.flush)
		g.mu.Unlock()
	default:
		g.sendLocked()
	}
}

func (g *progressGate) flush() {
	g.mu.Lock()
	g.timer = nil
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.sendLocked()
}

// sendLocked sends the pending notice (sends keep their order) and
// unlocks mu.
func (g *progressGate) sendLocked() {
	text := g.pending
	g.pending, g.last = "", time.Now()
	g.sendMu.Lock()
	g.mu.Unlock()
	defer g.sendMu.Unlock()
	g.send(text)
}

// close drops what is pending and sends nothing more.
func (g *progressGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
}

// lineLimiter cuts a stdio server's output line (one JSON-RPC message)
// longer than limit while it streams: a cut response is replaced by an error
// response to its id, a cut notification or request is dropped, and a line
// whose kind cannot be told ends the stream.
type lineLimiter struct {
	r     io.Reader
	limit int64
	onCut func(what string) // told of each line cut

	buf      []byte
	out      []byte // passed on before reading more
	n        int64  // bytes of the current line passed on
	head     []byte // the current line's first bytes
	skipping bool   // throwing away the rest of a cut line
	instead  []byte // what replaces the cut line once it ends
	err      error

	heard atomic.Int64 // when the server last wrote (Unix ns): a ping's stand-in (link.alive)
}

func newLineLimiter(r io.Reader, limit int64, onCut func(string)) *lineLimiter {
	return &lineLimiter{r: r, limit: limit, onCut: onCut, buf: make([]byte, 32<<10)}
}

func (l *lineLimiter) Read(p []byte) (int, error) {
	for len(l.out) == 0 {
		if l.err != nil {
			return 0, l.err
		}
		k, err := l.r.Read(l.buf)
		if k > 0 {
			l.heard.Store(time.Now().UnixNano())
		}
		l.take(l.buf[:k])
		if err != nil && l.err == nil {
			l.err = err
		}
	}
	n := copy(p, l.out)
	l.out = l.out[n:]
	if len(l.out) == 0 {
		l.out = l.out[:0:0] // let a large one go
	}
	return n, nil
}

func (l *lineLimiter) take(b []byte) {
	for len(b) > 0 && l.err == nil {
		i := bytes.IndexByte(b, '\n')
		seg := b
		if i >= 0 {
			seg = b[:i+1]
		}
		b = b[len(seg):]
		if !l.skipping {
			if room := l.limit - l.n; int64(len(seg)) <= room {
				l.pass(seg)
				if i >= 0 {
					l.n, l.head = 0, l.head[:0]
				}
				continue
			}
			l.cutLine(seg[:max(l.limit-l.n, 0)])
		}
		if i >= 0 { // the cut line ends here
			l.skipping = false
			l.out = append(l.out, l.instead...)
			l.instead = nil
		}
	}
}

func (l *lineLimiter) pass(seg []byte) {
	l.out = append(l.out, seg...)
	l.n += int64(len(seg))
	if room := headBytes - len(l.head); room > 0 {
		l.head = append(l.head, seg[:min(room, len(seg))]...)
	}
}

// cutLine ends the current line after its last bytes within the limit,
// and decides what replaces it.
func (l *lineLimiter) cutLine(last []byte) {
	l.pass(last)
	l.out = append(l.out, '\n')
	id, kind := messageHead(l.head)
	l.n, l.head, l.skipping = 0, l.head[:0], true
	switch kind {
	case "response":
		resp, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
			"error": map[string]any{"code": -32603, "message": tooLarge(l.limit).Error()}})
		l.instead = append(resp, '\n')
		l.onCut("a response")
	case "message":
		l.onCut("a notification or request")
	default:
		l.err = fmt.Errorf("%w, and its kind cannot be told from its first %d bytes", tooLarge(l.limit), headBytes)
		l.onCut("a message of unknown kind")
	}
}

// messageHead reads a cut JSON-RPC message's first members: kind "message"
// with a method, "response" with an id and no method first, "" unknown.
func messageHead(head []byte) (id json.RawMessage, kind string) {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, ""
	}
	for {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			break
		}
		switch key {
		case "method":
			return nil, "message"
		case "result", "error":
			if id != nil {
				return id, "response"
			}
			return nil, ""
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			break
		}
		if key == "id" && len(v) > 0 && (v[0] == '"' || v[0] == '-' || v[0] >= '0' && v[0] <= '9') {
			id = v
		}
	}
	if id != nil {
		return id, "response"
	}
	return nil, ""
}

// limitClient is the HTTP client of the SSE and streamable HTTP
// transports: every response body is cut at limit bytes, an event stream
// at limit bytes per event.
func limitClient(limit int64) *http.Client {
	return &http.Client{Transport: limitTransport{base: http.DefaultTransport, limit: limit}}
}

type limitTransport struct {
	base  http.RoundTripper
	limit int64
}

func (t limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	sse := strings.HasPrefix(strings.ToLower(resp.Header.Get("Content-Type")), "text/event-stream")
	resp.Body = &limitedBody{rc: resp.Body, limit: t.limit, sse: sse, lineStart: true}
	return resp, nil
}

// limitedBody fails a read past limit bytes of the body, or of one SSE event.
// mcp-go closes the body from another goroutine than the reader's, so err is
// shared under mu; the counts are the reader's.
type limitedBody struct {
	rc        io.ReadCloser
	limit     int64
	sse       bool
	n         int64
	lineStart bool
	mu        sync.Mutex
	err       error
}

// fail records err unless an error is recorded already, and returns the
// one recorded (fail(nil) only reads it).
func (b *limitedBody) fail(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
	return b.err
}

var errBodyClosed = errors.New("body closed")

func (b *limitedBody) Read(p []byte) (int, error) {
	if err := b.fail(nil); err != nil {
		return 0, err
	}
	k, err := b.rc.Read(p)
	over := false
	if !b.sse {
		b.n += int64(k)
		over = b.n > b.limit
	} else {
		for _, c := range p[:k] {
			switch {
			case c == '\n' && b.lineStart:
				b.n = 0 // a blank line ends the event
			case c == '\n':
				b.lineStart = true
			case c != '\r':
				b.lineStart = false
				b.n++
				over = over || b.n > b.limit
			}
		}
	}
	if over {
		err := b.fail(tooLarge(b.limit))
		_ = b.rc.Close()
		return 0, err
	}
	return k, err
}

func (b *limitedBody) Close() error {
	b.fail(errBodyClosed)
	return b.rc.Close()
}
