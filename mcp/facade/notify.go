package facade

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
)

// maxBody bounds one HTTP request's body: a call's input is at most
// 1 MiB (docs/protocol.md 13).
const maxBody = 4 << 20

// stampNotification gives a 2026-07-28 notification that carries the
// Mcp-Protocol-Version header but no _meta protocol version the version
// of its header: the Go SDK treats the 400 mcp-go answers as a dead
// connection (issue 18). Requests are left alone. It also bounds and
// buffers the body; false: it could not be read (answered).
func stampNotification(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost || r.Body == nil {
		return true
	}
	version := r.Header.Get(mcp.HeaderProtocolVersion)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeHTTPError(w, http.StatusRequestEntityTooLarge, "facade: the request body is too large or unreadable")
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if !mcp.IsModernProtocol(version) {
		return true
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.ID != nil || !strings.HasPrefix(msg.Method, "notifications/") {
		return true // a request, or not one JSON-RPC object (a batch, garbage): mcp-go answers it
	}
	v, _ := json.Marshal(version)
	stamped, ok := withMember(body, "params", func(params json.RawMessage) (json.RawMessage, bool) {
		return withMember(params, "_meta", func(meta json.RawMessage) (json.RawMessage, bool) {
			return withMember(meta, mcp.MetaKeyProtocolVersion, func(had json.RawMessage) (json.RawMessage, bool) { return v, had == nil })
		})
	})
	if ok {
		r.Body = io.NopCloser(bytes.NewReader(stamped))
		r.ContentLength = int64(len(stamped))
	}
	return true
}

// withMember returns the JSON object obj (absent or null: {}) with its
// member key set to what set makes of it (nil: absent); false when obj is
// not an object or set declines.
func withMember(obj json.RawMessage, key string, set func(json.RawMessage) (json.RawMessage, bool)) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if obj != nil && json.Unmarshal(obj, &m) != nil {
		return nil, false
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	v, ok := set(m[key])
	if !ok {
		return nil, false
	}
	m[key] = v
	out, err := json.Marshal(m)
	return out, err == nil
}

// postedBody reads a POST's body (buffered by stampNotification) and
// puts it back for the next handler.
func postedBody(r *http.Request) ([]byte, bool) {
	if r.Method != http.MethodPost || r.Body == nil {
		return nil, false
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, err == nil
}

// modernCancel reports whether r is a notifications/cancelled of a
// 2026-07-28 client over HTTP, which the facade answers 202 itself and
// drops: without MCP sessions the request id it names is ambiguous, and
// mcp-go cancelled whichever host's request had that id
// (TestGoSDKTwoHosts). The revision cancels a request over HTTP by ending
// its stream, which interrupts the bus call.
func modernCancel(r *http.Request) bool {
	if !mcp.IsModernProtocol(r.Header.Get(mcp.HeaderProtocolVersion)) {
		return false
	}
	body, ok := postedBody(r)
	if !ok {
		return false
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	return json.Unmarshal(body, &msg) == nil && msg.ID == nil && msg.Method == string(mcp.MethodNotificationCancelled)
}
