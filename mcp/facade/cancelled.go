package facade

import (
	"encoding/json"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"
)

// modernCancel reports whether r is a notifications/cancelled of a
// 2026-07-28 client over HTTP, which the facade answers 202 itself and
// does not pass on. That revision has no MCP sessions, so the request id
// it names is ambiguous: every host of the session and user has its own
// ids counting from the same start, and mcp-go, which keys the requests
// in flight by MCP session and id, cancelled whichever host's request had
// that id (TestGoSDKTwoHosts). Over HTTP the revision cancels a request
// by ending its stream, which ends the request's context; that is what
// interrupts the bus call. Its body has been read (stampNotification).
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
