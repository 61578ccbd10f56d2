// Package bus is the wire contract of toolbus in one place: the CloudEvent ⇄
// NATS message mapping (structured JSON mode on send; structured and binary
// ce- headers on receive), subject builders, event types, error codes,
// identifier rules, the JSON shapes of every event's data, and the names and
// defaults of the JetStream buckets and streams (package store creates them;
// package embedded starts a nats-server).
//
// The codec is hand-written over a plain struct rather than routed through
// sdk-go's event.Event: the router decodes and encodes several events per tool
// call, and a struct with encoding/json costs a fraction of the generic event
// model. Conformance with sdk-go is checked in the tests in both directions.
package bus
