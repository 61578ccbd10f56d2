package main

import (
	"fmt"
	"os"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/toolbus/toolbus/bus"
)

// fileConfig is the router's --config file, YAML or JSON:
//
//	groups:
//	  - name: ops
//	    description: Deploy and roll back services.
//	    instructions: Always deploy to staging first.
//	    scope: meta            # or external
//	    active_by_default: false
//	permissions:
//	  mode: default            # accept_edits, explore, bypass, dont_ask
//	  rules: [{tool: shell, pattern: "git:*", behavior: allow}]
//	  work_dirs: [/srv/work]
//	park_ttl: 24h
type fileConfig struct {
	Groups      []bus.Group `json:"groups"`
	Permissions struct {
		Mode     string     `json:"mode"`
		Rules    []bus.Rule `json:"rules"`
		WorkDirs []string   `json:"work_dirs"`
	} `json:"permissions"`
	ParkTTL string `json:"park_ttl"`

	parkTTL time.Duration
}

func loadConfig(path string) (*fileConfig, error) {
	cfg := &fileConfig{}
	if path == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, cfg); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	for i := range cfg.Groups {
		if cfg.Groups[i].Scope == "" {
			cfg.Groups[i].Scope = bus.ScopeMeta
		}
	}
	if cfg.ParkTTL != "" {
		d, err := time.ParseDuration(cfg.ParkTTL)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("config %s: park_ttl %q is not a positive duration", path, cfg.ParkTTL)
		}
		cfg.parkTTL = d
	}
	return cfg, nil
}
