package offload

// MetaSubject is metaSubject, for the tests that forge metadata.
var MetaSubject = metaSubject

// HeadTail is headTail, for TestHeadTail.
var HeadTail = headTail
