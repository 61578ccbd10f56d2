package bus

// ValidID reports whether s may be a session id, reply id or tool call id:
// ^[A-Za-z0-9_-]{1,128}$. Such identifiers become subject tokens and KV keys.
func ValidID(s string) bool { return validToken(s, 128) }

// ValidName reports whether s may be a tool or group name:
// ^[A-Za-z0-9_-]{1,64}$, the common subset of OpenAI, Anthropic and MCP.
func ValidName(s string) bool { return validToken(s, 64) }

func validToken(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
