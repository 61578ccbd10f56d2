package router

// Unknown names the configuration's unknown pinned, quota and group names
// as they are now (groups.Store.Unknown; docs/protocol.md 9): cmd/router
// warns of them once its built-in tools are registered.
func (r *Router) Unknown() []string { return r.groups.Unknown(r.reg) }
