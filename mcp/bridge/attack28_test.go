package bridge

import (
	"strings"
	"testing"
)

// TestAttackToolNameAcrossServers (session 28, red team): a bridged server
// names its tools, so a hostile one ("a", a community server) lists a tool
// "b__c" whose bus name, mcp__a__b__c, is server "a__b"'s tool "c" (or
// "b__elicit": server a__b's question tool, mcp__a__b__elicit). Bridged by
// one process, the bridge then failed to start (a tool added twice); by
// two, the registry refuses the later live definition as a conflict, so
// the server registered first takes the calls (and their inputs) meant
// for the other. Server names with "__", or ending in "_" (server
// "a_"'s "x" and server "a"'s "_x" are both mcp__a___x), are refused: the
// name between "mcp__" and the next "__" is then the server, whatever the
// tools are called.
func TestAttackToolNameAcrossServers(t *testing.T) {
	if ToolName("a", "b__c") != ToolName("a__b", "c") || ToolName("a", "_x") != ToolName("a_", "x") {
		t.Fatal("the names the refusal keeps apart no longer meet: drop it, or this test")
	}
	for _, name := range []string{"a__b", "gh__admin", "a_", "__", "a___b", "x__"} {
		_, err := Parse([]byte("servers: [{name: a, command: x}, {name: '" + name + "', command: y}]"))
		if err == nil || !strings.Contains(err.Error(), `"__"`) {
			t.Errorf("server %q: %v", name, err)
		}
	}
	for _, name := range []string{"a", "a_b", "_a", "a-_b", "a-", "gh_admin"} {
		if _, err := Parse([]byte("servers: [{name: '" + name + "', command: y}]")); err != nil {
			t.Errorf("server %q refused: %v", name, err)
		}
	}
	// Among names the configuration takes, no two servers share a tool name,
	// whatever their tools are called (sanitised, cut and hashed past 64).
	servers := []string{"a", "a_b", "_a", "a-", "b", "ab", "a-b", strings.Repeat("s", 40), strings.Repeat("s", 39)}
	tools := []string{"b__c", "c", "_b__c", "__c", "b_c", "elicit", "b__elicit", "_x", "x", "b.c", "b/c", "",
		strings.Repeat("t", 70), "s__" + strings.Repeat("t", 70), "_" + strings.Repeat("s", 30) + "__t"}
	owner := map[string]string{}
	for _, s := range servers {
		if err := (&Server{Name: s, Command: "x"}).validate(); err != nil {
			t.Fatalf("server %q: %v", s, err)
		}
		for _, tool := range tools {
			n := ToolName(s, tool)
			if o, ok := owner[n]; ok && o != s {
				t.Errorf("%s is a tool of server %s and of server %s", n, o, s)
			}
			owner[n] = s
		}
	}
}
