package facade

// Sessions returns how many (session, user) MCP servers are kept.
func (f *Facade) Sessions() int { return f.table.len() }

func (t *table) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions)
}
