package store

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// MCPConfig is the bucket of the MCP facades' task records and 2026-07-28
// request states (docs/mcp.md), so that any facade process answers
// tasks/get, tasks/cancel or a retry: kept at most bus.MCPStateMaxAge, one
// revision per key, values up to 1 MiB (a task's final CallToolResult).
// Routers create it (Setup); a facade that finds it missing creates it
// with the same configuration and never updates one that exists.
func MCPConfig(s bus.Subjects, replicas int, storage jetstream.StorageType) jetstream.KeyValueConfig {
	if replicas <= 0 {
		replicas = 1
	}
	return jetstream.KeyValueConfig{Bucket: s.Bucket(bus.BucketMCP), Description: "toolbus MCP facade tasks and request states",
		TTL: bus.MCPStateMaxAge, History: 1, MaxValueSize: 1 << 20, Replicas: replicas, Storage: storage}
}
