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
	var msg map[string]json.RawMessage
	if json.Unmarshal(body, &msg) != nil {
		return true // not one JSON-RPC object (a batch, garbage): mcp-go answers it
	}
	var method string
	if _, isRequest := msg["id"]; isRequest || json.Unmarshal(msg["method"], &method) != nil || !strings.HasPrefix(method, "notifications/") {
		return true
	}
	var params map[string]json.RawMessage
	if raw, ok := msg["params"]; ok && json.Unmarshal(raw, &params) != nil {
		return true
	}
	if params == nil {
		params = map[string]json.RawMessage{}
	}
	var meta map[string]json.RawMessage
	if raw, ok := params["_meta"]; ok && json.Unmarshal(raw, &meta) != nil {
		return true
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	if _, ok := meta[mcp.MetaKeyProtocolVersion]; ok {
		return true
	}
	meta[mcp.MetaKeyProtocolVersion], _ = json.Marshal(version)
	params["_meta"], _ = json.Marshal(meta)
	msg["params"], _ = json.Marshal(params)
	if stamped, err := json.Marshal(msg); err == nil {
		r.Body = io.NopCloser(bytes.NewReader(stamped))
		r.ContentLength = int64(len(stamped))
	}
	return true
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
