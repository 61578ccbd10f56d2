package offload

// Bound exposes bound to the tests.
var Bound = bound
