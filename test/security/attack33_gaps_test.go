package security

import "testing"

// TestAttackWorkerNamesRoutersTool (session 33, red team of the SDKs' meta
// tools: a gap in files this round did not own). A worker may register a
// tool named as one the router lists itself: reset_tools (with a meta
// group), load_skill_through_path and, with --skill-viewer, Skill (with a
// visible skill). The router's listing (groups.View.Tools, router/skills.go
// listing) then names it twice, the worker's definition (its description, a
// prompt aimed at the model) first; a call of the name runs the router's. A
// model API refuses a tool list with a name twice, so every agent of the
// session fails its turn until the worker leaves. The Python and Java
// adapters now keep the last of a name (the router's); the Go client, the
// facade and raw agents still see both. Without skills (or without a meta
// group) the worker's tool of that name is listed alone and runs.
func TestAttackWorkerNamesRoutersTool(t *testing.T) {
	t.Skip("GAP: registry or groups: refuse registering reset_tools, search_tools, load_skill_through_path and Skill (or leave such a worker tool out of every listing and resolution), as the router's own names")
}
