package facade

import (
	"strings"
	"testing"
)

func TestTaskMessage(t *testing.T) {
	for _, c := range []struct {
		name, body   string
		ours, modern bool
	}{
		{"tasks/get", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"x"}}`, true, false},
		{"tasks/result", `{"jsonrpc":"2.0","id":"a","method":"tasks/result","params":{"taskId":"x"}}`, true, false},
		{"tasks/cancel", `{"jsonrpc":"2.0","id":2,"method":"tasks/cancel","params":{"taskId":"x"}}`, true, false},
		{"tasks/list", `{"jsonrpc":"2.0","id":3,"method":"tasks/list"}`, true, false},
		{"task call", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t","task":{}}}`, true, false},
		{"modern task call", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t","task":{"ttl":5},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, true, true},
		{"old revision in _meta", `{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}`, true, false},
		{"plain call", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"t"}}`, false, false},
		{"null task", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"t","task":null}}`, false, false},
		{"notification", `{"jsonrpc":"2.0","method":"tasks/get","params":{"taskId":"x"}}`, false, false},
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"tasks/get"}`, false, false},
		{"not 2.0", `{"jsonrpc":"1.0","id":1,"method":"tasks/get"}`, false, false},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"tasks/get"}]`, false, false},
		{"garbage", `tasks/get`, false, false},
		{"tools/list", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"task":{}}}`, false, false},
	} {
		m, ok := taskMessage([]byte(c.body))
		if ok != c.ours {
			t.Errorf("%s: ours %v, want %v", c.name, ok, c.ours)
			continue
		}
		if ok && m.modern() != c.modern {
			t.Errorf("%s: modern %v, want %v", c.name, m.modern(), c.modern)
		}
	}
}

func TestKeys(t *testing.T) {
	id := newID()
	if !idPattern.MatchString(id) || id == newID() {
		t.Fatalf("newID %q", id)
	}
	for _, bad := range []string{"", "x", strings.Repeat("0", 31), strings.Repeat("g", 32), strings.Repeat("0", 32) + ".>", "*", strings.ToUpper(id)} {
		if idPattern.MatchString(bad) {
			t.Errorf("%q taken for an id", bad)
		}
	}
	// Users are free text; keys stay valid KV keys, one per user.
	a, b := userKey("t", "s1", "alice smith.*>", id), userKey("t", "s1", "bob", id)
	if a == b || strings.ContainsAny(a, " *>") || strings.Count(a, ".") != 3 {
		t.Fatalf("keys %q %q", a, b)
	}
	if userKey("r", "s1", "alice", id) == userKey("t", "s1", "alice", id) {
		t.Fatal("a state and a task share a key")
	}
}

// FuzzTaskMessage: any body is ours or not, without a panic, and a body
// that is ours is a request with an id.
func FuzzTaskMessage(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t","task":{}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"x","_meta":{"io.modelcontextprotocol/protocolVersion":7}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/list","params":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := taskMessage(body)
		if !ok {
			return
		}
		if len(m.ID) == 0 || !strings.HasPrefix(m.Method, "t") {
			t.Fatalf("%q taken: %+v", body, m)
		}
		_ = m.modern()
	})
}

// taskMessage returns body as a request the facade answers itself
// (session.take's test of a task message).
func taskMessage(body []byte) (*rpcMessage, bool) {
	m := parseMessage(body)
	if !m.request() || !isTaskMessage(m) {
		return nil, false
	}
	return m, true
}
