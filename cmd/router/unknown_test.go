package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestStartWarnsUnknownNames: a router whose configuration pins or counts
// names that match nothing says so at start, after its built-in tools are
// registered (so a pinned built-in tool is not warned of).
func TestStartWarnsUnknownNames(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "router.yaml")
	if err := os.WriteFile(cfg, []byte(`
groups: [{name: notes, description: Keep notes., scope: meta}]
search: {enabled: true, pinned: {tools: [get_current_time, get_curent_time], groups: [notes, opz]}}
quotas: {rules: [{name: paid, tools: [echo, web_search], budget: {units: 10}}]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	m, _ := startRun(t, []string{"--listen", "127.0.0.1:-1", "--data", filepath.Join(dir, "data"), "--config", cfg},
		regexp.MustCompile(`(?s)serving prefix.*warning: quotas rule paid: web_search is not a registered tool[^\n]*\n`))
	out := m[0]
	for _, want := range []string{
		"toolbus: warning: search.pinned.tools: get_curent_time is not a registered tool",
		"toolbus: warning: search.pinned.groups: opz is not a defined group",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("start-up output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "warning:"); n != 3 {
		t.Errorf("%d warnings, want 3:\n%s", n, out)
	}
}
