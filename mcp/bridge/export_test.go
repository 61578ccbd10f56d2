package bridge

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
