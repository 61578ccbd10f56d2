package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/limits"
	"github.com/toolbus/toolbus/store"
)

// fileConfig is the router's --config file, YAML or JSON (docs/operations.md,
// "The router's config file"). The limits flags override the file.
type fileConfig struct {
	Groups      []bus.Group `json:"groups"`
	Permissions struct {
		Mode     string     `json:"mode"`
		Rules    []bus.Rule `json:"rules"`
		WorkDirs []string   `json:"work_dirs"`
	} `json:"permissions"`
	ParkTTL duration     `json:"park_ttl,omitempty"`
	Limits  limitsConfig `json:"limits"`
	Quotas  quotas       `json:"quotas"`
	Audit   *auditConfig `json:"audit"`
	Cache   struct {
		Enabled bool `json:"enabled"`
		// MaxBytes bounds P_rcache, its oldest entries dropped past it
		// (reserved on each server): absent, 256MiB; "off" (-1), none; 0
		// and negative numbers are refused, as for every bound.
		MaxBytes softBound `json:"max_bytes,omitempty"`
	} `json:"cache"`
	Search struct {
		Enabled bool        `json:"enabled"`
		Pinned  groups.Pins `json:"pinned"`
	} `json:"search"`
}

// limitsConfig holds the retention and size limits set outside the router
// package: the JetStream store's and the built-in worker's.
type limitsConfig struct {
	EventsMaxAge    duration `json:"events_max_age,omitempty"`
	EventsMaxBytes  byteSize `json:"events_max_bytes,omitempty"`
	OutputsTTL      duration `json:"outputs_ttl,omitempty"`
	OutputsMaxBytes byteSize `json:"outputs_max_bytes,omitempty"`
	InlineOutput    byteSize `json:"inline_output,omitempty"`
	MaxOutput       byteSize `json:"max_output,omitempty"`
	// The soft bounds of P_parked, P_sessions, P_ledger, P_tasks, P_mcp (store.Bound).
	ParkedMaxBytes   softBound `json:"parked_max_bytes,omitempty"`
	SessionsMaxBytes softBound `json:"sessions_max_bytes,omitempty"`
	LedgerMaxBytes   softBound `json:"ledger_max_bytes,omitempty"`
	TasksMaxBytes    softBound `json:"tasks_max_bytes,omitempty"`
	MCPMaxBytes      softBound `json:"mcp_max_bytes,omitempty"`
	// The catalogue's bounds on names (store.Count; protocol 7.1, 1.25).
	MaxTools  int `json:"max_tools,omitempty"`
	MaxGroups int `json:"max_groups,omitempty"`
}

func loadConfig(path string) (*fileConfig, error) {
	if path == "" {
		return &fileConfig{}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parseConfig(path, b)
}

// parseConfig decodes a config file's bytes strictly; name is for errors.
func parseConfig(name string, b []byte) (*fileConfig, error) {
	cfg := &fileConfig{}
	if err := yaml.UnmarshalStrict(b, cfg); err != nil {
		return nil, fmt.Errorf("config %s: %w", name, err)
	}
	for i := range cfg.Groups {
		cfg.Groups[i].Scope = cmp.Or(cfg.Groups[i].Scope, bus.ScopeMeta)
	}
	if err := cfg.Quotas.Check(); err != nil {
		return nil, fmt.Errorf("config %s: quotas: %w", name, err)
	}
	return cfg, nil
}

// limitFlags registers the limits flags on fs; their values, when given,
// override the config file's (limitsConfig.override).
func limitFlags(fs *flag.FlagSet) *limitsConfig {
	l := &limitsConfig{}
	fs.Var(&l.EventsMaxAge, "events-max-age", "how long the events stream P_EVENTS keeps events (default 24h)")
	fs.Var(&l.EventsMaxBytes, "events-max-bytes", "bytes the events stream keeps, oldest dropped first, reserved on each server, e.g. 4GiB (default 1GiB)")
	fs.Var(&l.OutputsTTL, "outputs-ttl", "how long outputs too large to send inline stay in the P_outputs object store (default 24h)")
	fs.Var(&l.OutputsMaxBytes, "outputs-max-bytes", "bytes the P_outputs object store may hold, reserved on each server; a new output beyond it is refused (default: 32,768 messages of at most 136 KiB, nothing reserved)")
	for _, b := range []struct {
		v          *softBound
		name, what string
		def        int
	}{{&l.ParkedMaxBytes, "parked", "parked calls (a new park past it ends limit_exceeded)", store.DefaultParkedMaxBytes},
		{&l.SessionsMaxBytes, "sessions", "sessions (a new session's first write past it is refused limit_exceeded)", store.DefaultSessionsMaxBytes},
		{&l.LedgerMaxBytes, "ledger", "write calls' results (a new write call past it ends limit_exceeded, not run)", store.DefaultLedgerMaxBytes},
		{&l.TasksMaxBytes, "tasks", "background tasks (a new task past it ends limit_exceeded at the call's timeout)", store.DefaultTasksMaxBytes},
		{&l.MCPMaxBytes, "mcp", "the MCP facade's tasks and request states (a new one past it is a JSON-RPC error)", store.DefaultMCPMaxBytes}} {
		fs.Var(b.v, b.name+"-max-bytes", fmt.Sprintf("bytes the P_%s bucket of %s may hold; its stream's max_bytes, a quarter (at least 16MiB) more, is reserved on each server; off: no bound (default %dMiB)", b.name, b.what, b.def>>20))
	}
	fs.IntVar(&l.MaxTools, "max-tools", 0, fmt.Sprintf("tool names the catalogue P_tools takes: a new one past it is rejected limit_exceeded, a held one still taken; -1: no bound (default %d)", store.DefaultMaxTools))
	fs.IntVar(&l.MaxGroups, "max-groups", 0, fmt.Sprintf("group names P_groups takes, likewise; -1: no bound (default %d)", store.DefaultMaxGroups))
	fs.Var(&l.InlineOutput, "inline-output", "encoded output size of the built-in tools above which it is stored in P_outputs (default 1MiB, capped by the payload limit)")
	fs.Var(&l.MaxOutput, "max-output", "output ceiling: a built-in tool's encoded output above it is refused, and so is a worker's stored output (default 64MiB)")
	return l
}

// override returns l with every value that o sets (not zero) taken from
// o: every field, so a limit added to limitsConfig is overridden too.
func (l limitsConfig) override(o *limitsConfig) limitsConfig {
	to, from := reflect.ValueOf(&l).Elem(), reflect.ValueOf(o).Elem()
	for i := range from.NumField() {
		if f := from.Field(i); !f.IsZero() {
			to.Field(i).Set(f)
		}
	}
	return l
}

// apply sets the store's retention from l.
func (l limitsConfig) apply(c *store.Config) {
	c.EventsMaxAge = time.Duration(l.EventsMaxAge)
	c.EventsMaxBytes = int64(l.EventsMaxBytes)
	c.OutputsTTL = time.Duration(l.OutputsTTL)
	c.OutputsMaxBytes = int64(l.OutputsMaxBytes)
	c.ParkedMaxBytes, c.SessionsMaxBytes, c.LedgerMaxBytes = int64(l.ParkedMaxBytes), int64(l.SessionsMaxBytes), int64(l.LedgerMaxBytes)
	c.TasksMaxBytes, c.MCPMaxBytes = int64(l.TasksMaxBytes), int64(l.MCPMaxBytes)
	c.MaxTools, c.MaxGroups = l.MaxTools, l.MaxGroups
}

// duration is a positive Go duration ("24h") in a file or a flag.
type duration time.Duration

func (d *duration) String() string {
	if d == nil || *d == 0 {
		return ""
	}
	return time.Duration(*d).String()
}

func (d *duration) Set(s string) error {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || v <= 0 {
		return fmt.Errorf("%q is not a positive duration (e.g. 24h, 90m)", s)
	}
	*d = duration(v)
	return nil
}

func (d *duration) UnmarshalJSON(b []byte) error { return setJSON(d, b) }

// byteSize is a positive number of bytes: a plain number, or one with a
// unit, B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers
// of 1024), e.g. 512MiB.
type byteSize int64

var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}, {"b", 1},
}

func (b *byteSize) Set(s string) error {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || strings.ContainsAny(t, "xXpP_") {
		return fmt.Errorf("%q is not a size in bytes (e.g. 1048576, 512MiB, 2GB)", s)
	}
	n := v * mult
	if math.IsNaN(n) || n < 1 || n > math.MaxInt64/2 {
		return fmt.Errorf("%q is not a positive size in bytes", s)
	}
	*b = byteSize(n)
	return nil
}

func (b *byteSize) String() string {
	if b == nil || *b == 0 {
		return ""
	}
	return strconv.FormatInt(int64(*b), 10)
}

func (b *byteSize) UnmarshalJSON(raw []byte) error { return setJSON(b, raw) }

// softBound is a byteSize, or "off" (-1): no bound.
type softBound byteSize

func (b *softBound) String() string { return (*byteSize)(b).String() }

func (b *softBound) Set(s string) error {
	if strings.EqualFold(strings.TrimSpace(s), "off") {
		*b = -1
		return nil
	}
	return (*byteSize)(b).Set(s)
}

func (b *softBound) UnmarshalJSON(raw []byte) error { return setJSON(b, raw) }

// quotas is limits.Policy with max_bytes a softBound, as every bound:
// absent, limits' default; "off" (-1), none.
type quotas struct{ limits.Policy }

func (q *quotas) UnmarshalJSON(raw []byte) error {
	v := struct {
		*limits.Policy
		MaxBytes softBound `json:"max_bytes"` // hides Policy's
	}{Policy: &q.Policy}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	q.MaxBytes = int64(v.MaxBytes)
	return nil
}

// setJSON sets v from a JSON string, or from any other JSON value (a
// number) as written, as its flag would be set.
func setJSON(v flag.Value, raw []byte) error {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	return v.Set(s)
}

// auditConfig is the audit block of the config file.
type auditConfig struct {
	MaxAge   duration `json:"max_age,omitempty"`
	MaxBytes byteSize `json:"max_bytes,omitempty"`
	MaxWait  duration `json:"max_wait,omitempty"`
	Inputs   bool     `json:"inputs,omitempty"`
	Redact   []string `json:"redact,omitempty"`
}

// config is the router's audit configuration; nil (no block) turns the
// audit trail off.
func (a *auditConfig) config() *audit.Config {
	if a == nil {
		return nil
	}
	return &audit.Config{MaxAge: time.Duration(a.MaxAge), MaxBytes: int64(a.MaxBytes), MaxWait: time.Duration(a.MaxWait), Inputs: a.Inputs, Redact: a.Redact}
}
