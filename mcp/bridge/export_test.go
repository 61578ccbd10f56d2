package bridge

import "slices"

// Tools returns the bus names of the tools the server named server has
// registered now (nil while it is not connected), in the server's order.
func (b *Bridge) Tools(server string) []string {
	for _, l := range b.links {
		if l.s.Name == server {
			l.mu.Lock()
			defer l.mu.Unlock()
			var names []string
			for _, d := range l.defs {
				names = append(names, d.Name)
			}
			return names
		}
	}
	return nil
}

// Unknown returns the names in the server's enable_tools and disable_tools
// that its last tools/list did not have (nil before it was listed).
func (b *Bridge) Unknown(server string) []string {
	for _, l := range b.links {
		if l.s.Name == server {
			l.mu.Lock()
			defer l.mu.Unlock()
			return slices.Clone(l.unknown)
		}
	}
	return nil
}
