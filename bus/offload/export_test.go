package offload

// MetaSubject is metaSubject, for the tests that forge metadata.
var MetaSubject = metaSubject
