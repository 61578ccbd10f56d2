// Package store owns the JetStream side of toolbus: creating the buckets and
// streams of docs/protocol.md section 8, the one compare-and-set helper every
// read-modify-write goes through (with the conflict codes of single-node and
// replicated streams and one bounded retry policy), reads that see the
// latest acknowledged write on a replicated bucket, and the watch that feeds
// every cache.
package store
