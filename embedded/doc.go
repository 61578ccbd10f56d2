// Package embedded starts nats-server with JetStream inside this process: one
// node for a laptop's router, or a cluster of nodes on loopback ports for
// tests of replicated buckets and streams, where a node can be stopped and
// started again.
package embedded
