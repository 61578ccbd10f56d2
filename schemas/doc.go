// Package schemas handles the JSON schemas of tool inputs: it compiles a
// definition's input_schema once ([Compile]), validates call inputs against it
// with problems a model can act on ([Schema.Validate], [InvalidInputMessage]),
// accepts a call's input in the forms models send it ([ParseInput]), derives a
// schema from a Go type for typed tools ([For]) and renders tool definitions in
// the listing formats of the providers ([Export]).
//
// Compilation fails closed. A schema that is not a JSON object, is not an
// object schema, does not compile, refers to anything but a same-document
// "#..." fragment, or is larger than [MaxSchemaBytes] is an error, and nothing
// is ever fetched: meta-schemas come from the validator's built-in copies and
// every other URL is refused.
//
// Validation uses github.com/santhosh-tekuri/jsonschema/v5 (draft 2020-12 by
// default, earlier drafts when "$schema" names them); schemas of Go types are
// derived with github.com/invopop/jsonschema, inlined and stripped of $schema,
// $id and titles. See docs/schemas.md for the reasons.
package schemas
