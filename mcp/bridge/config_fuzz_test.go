package bridge

import (
	"encoding/json"
	"testing"
)

// FuzzParseConfig: an MCP bridge config never panics Parse; one that
// parses encodes (as JSON, which the YAML decoder reads) to a file that
// parses to the same configuration.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"servers:\n  - name: fs\n    command: npx\n    args: [-y, '@modelcontextprotocol/server-filesystem', /tmp]\n    env: {A: b}\n    group: files\n    timeout: 30s\n    enable_tools: [read_file]\ngroups:\n  - {name: files, description: Files., scope: meta}\n",
		`{"servers":[{"name":"web","transport":"http","url":"http://127.0.0.1:1/mcp","headers":{"Authorization":"Bearer x"},"disable_tools":["a"]}]}`,
		`{"servers":[{"name":"s","transport":"sse","url":"http://x"}]}`,
		"servers: [{name: a, command: x}, {name: a, command: y}]", "servers: [{name: 'bad name', command: x}]",
		"servers: [{name: a, command: x, enable_tools: [t], disable_tools: [t]}]", "servers: [{name: a, url: 'ftp://x'}]",
		"servers: [{name: a, command: x, timeout: -1s}]", "servers: [{name: a, command: x, extra: 1}]", "groups: [{name: ''}]", "", "servers: 5",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := Parse(b)
		if err != nil {
			return
		}
		enc, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg2, err := Parse(enc)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", enc, err)
		}
		enc2, _ := json.Marshal(cfg2)
		if string(enc) != string(enc2) {
			t.Fatalf("not a fixed point:\n%s\n%s", enc, enc2)
		}
		for i := range cfg.Servers {
			if cfg.Servers[i].timeout != cfg2.Servers[i].timeout || cfg.Servers[i].timeout <= 0 {
				t.Fatalf("timeout %v vs %v", cfg.Servers[i].timeout, cfg2.Servers[i].timeout)
			}
		}
	})
}
