// Package permission decides whether a tool call may run, must be confirmed,
// or is refused, from a session's permission context: a mode, allow, deny and
// ask rules, and working directories (docs/protocol.md 6.4, docs/permission.md).
//
// Decide applies the checks in a fixed order: deny rules, ask rules,
// read-only tools, the dangerous-path safety check, then the mode (the tool's
// own check, allow rules, accept_edits working directories). Rules match the
// tool name alone, or a pattern that the tool's rule matcher applies to one
// input field: a command (prefix "git:*", glob "npm run *", exact or
// substring) or a path glob ("src/**/*.go", relative to each working
// directory). Path checks resolve symlinks on the local file system.
//
// Everything here is a pure function of its arguments and the file system;
// all functions are safe for concurrent use.
package permission
