package bus

import "encoding/json"

// Question is a bridged MCP server's question (its elicitation/create)
// as a parked call of the request-scoped external tool
// mcp__<server>__elicit shows it: the call's input (docs/mcp.md "Bridge
// mapping"). The bridge writes it (mcp/bridge); the MCP facade reads it
// to put the question to the calling host (mcp/facade). One record, so
// the two cannot drift apart.
type Question struct {
	// Server is the bridged server's name (the middle of its tools' names).
	Server string `json:"server"`
	// User is the asking call's batch user: a facade asks only that
	// user's host.
	User json.RawMessage `json:"user,omitempty"`
	// Mode is "form" or "url"; Message what the server asks.
	Mode    string `json:"mode"`
	Message string `json:"message"`
	// RequestedSchema is the form's schema; URL and ElicitationID are URL
	// mode's.
	RequestedSchema json.RawMessage `json:"requested_schema,omitempty"`
	URL             string          `json:"url,omitempty"`
	ElicitationID   string          `json:"elicitation_id,omitempty"`
	// Calls are the ids of the bus calls that were running on the server
	// when it asked (over streamable HTTP, the one whose stream it came on).
	Calls []string `json:"calls"`
	// Refused says why the previous answer was not taken (it did not fit
	// the schema); the question is asked again.
	Refused string `json:"refused,omitempty"`
}
