package main

import (
	"strings"
	"testing"
	"time"
)

func TestConfigQuotasAndSearch(t *testing.T) {
	cfg, err := parseConfig("t.yaml", []byte(`
quotas:
  tenants: {alice: acme}
  rules:
    - {name: paid, tools: [web_search], per: [user], budget: {units: 1000}}
    - {name: writes, writes: true, rate: {calls: 10, interval_ms: 60000, burst: 2}}
    - {name: shown, tools: [read_record], cache_hits: true, budget: {units: 20}}
audit: {max_age: 720h, max_wait: 10s, inputs: true, redact: [password]}
cache: {enabled: true}
search:
  enabled: true
  pinned: {tools: [whoami], groups: [core]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Quotas.Rules) != 3 || cfg.Quotas.Rules[0].Budget.Cost != 1 || !cfg.Quotas.Rules[2].CacheHits || !cfg.Search.Enabled || cfg.Search.Pinned.Groups[0] != "core" {
		t.Fatalf("%+v", cfg)
	}
	if a := cfg.Audit.config(); a == nil || a.MaxAge != 720*time.Hour || a.MaxWait != 10*time.Second || !a.Inputs || a.Redact[0] != "password" || !cfg.Cache.Enabled {
		t.Fatalf("audit %+v", a)
	}
	if (*auditConfig)(nil).config() != nil {
		t.Fatal("no audit block: audit on")
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

// TestConfigGuardBounds: cache.max_bytes takes a size or "off" as the
// other bounds do (absent: rcache's default; 0 and negative numbers are
// refused), and so does quotas.max_bytes, the quota state's bound.
func TestConfigGuardBounds(t *testing.T) {
	for in, want := range map[string][2]int64{
		"cache: {enabled: true}":                                              {0, 0},
		"cache: {enabled: true, max_bytes: 64MiB}":                            {64 << 20, 0},
		"cache: {enabled: true, max_bytes: 1000000}":                          {1e6, 0},
		`cache: {enabled: true, max_bytes: "off"}`:                            {-1, 0},
		"quotas: {max_bytes: 1048576}\ncache: {max_bytes: 2GB}":               {2e9, 1 << 20},
		"quotas: {max_bytes: 256MiB, rules: [{name: x, budget: {units: 1}}]}": {0, 256 << 20},
		`quotas: {max_bytes: "off"}`:                                          {0, -1},
		"quotas: {max_bytes: 1.5 KB}":                                         {0, 1500},
	} {
		cfg, err := parseConfig("t.yaml", []byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got := [2]int64{int64(cfg.Cache.MaxBytes), cfg.Quotas.MaxBytes}; got != want {
			t.Errorf("%s: cache and quotas bounds %v, want %v", in, got, want)
		}
	}
	for _, bad := range []string{"cache: {max_bytes: 0}", "cache: {max_bytes: -5}", "cache: {max_bytes: lots}", "cache: {max_byte: 5}",
		"quotas: {max_bytes: 0}", "quotas: {max_bytes: -1}", "quotas: {max_bytes: 12 parsecs}", "quotas: {max_bytes: 5, extra: 1}"} {
		if _, err := parseConfig("t.yaml", []byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
