package bus

import "time"

// Defaults of the JetStream resources.
const (
	DefaultHeartbeat    = 5 * time.Second
	DefaultDedupeWindow = 10 * time.Minute
	DefaultSessionTTL   = 24 * time.Hour
	DefaultEventsMaxAge = 24 * time.Hour
	DefaultHandoffTTL   = 7 * 24 * time.Hour
	// DefaultOutputsTTL is how long a stored output (docs/protocol.md 5.9) is
	// kept: as long as the events that refer to it.
	DefaultOutputsTTL = 24 * time.Hour
	// MCPStateMaxAge bounds how long the MCP facade's task records and
	// request states are kept (BucketMCP's max age).
	MCPStateMaxAge = 24 * time.Hour
)

// Bucket and stream names, before the prefix.
const (
	BucketTools    = "tools"
	BucketWorkers  = "workers"
	BucketGroups   = "groups"
	BucketSessions = "sessions"
	BucketParked   = "parked"
	BucketLedger   = "ledger"
	BucketMCP      = "mcp" // the MCP facade's tasks and request states
	StreamEvents   = "EVENTS"
	StreamWork     = "WORK"
	ObjectSkills   = "skills"
	ObjectOutputs  = "outputs"
)
