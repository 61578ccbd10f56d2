package main

import (
	"strings"
	"testing"
)

func TestConfigQuotasAndSearch(t *testing.T) {
	cfg, err := parseConfig("t.yaml", []byte(`
quotas:
  tenants: {alice: acme}
  rules:
    - {name: paid, tools: [web_search], per: [user], budget: {units: 1000}}
    - {name: writes, writes: true, rate: {calls: 10, interval_ms: 60000, burst: 2}}
search:
  enabled: true
  pinned: {tools: [whoami], groups: [core]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Quotas.Rules) != 2 || cfg.Quotas.Rules[0].Budget.Cost != 1 || !cfg.Search.Enabled || cfg.Search.Pinned.Groups[0] != "core" {
		t.Fatalf("%+v", cfg)
	}
	for in, want := range map[string]string{
		"quotas: {rules: [{name: x}]}":                           "neither a rate nor a budget",
		"quotas: {rules: [{name: x, budget: {units: 1}, y: 1}]}": "unknown field",
		"search: {enabled: true, pinned: {tool: [a]}}":           "unknown field",
	} {
		if _, err := parseConfig("t.yaml", []byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}
