package limits

import (
	"fmt"
	"slices"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// Dimensions a rule counts per (Rule.Per).
const (
	PerTool    = "tool"
	PerUser    = "user"
	PerSession = "session"
	PerTenant  = "tenant"
)

var dimensions = []string{PerTool, PerUser, PerSession, PerTenant}

// MaxRules bounds the rules of one deployment: Check looks at each.
const MaxRules = 256

// MaxRateSpan bounds a rate's interval per call times its burst: the
// longest a GCRA value can matter, and the TTL of the rates bucket. A
// longer horizon is a budget.
const MaxRateSpan = 24 * time.Hour

// Policy is the limits block of the router configuration.
type Policy struct {
	// Rules are checked in order; a call is refused by the first it is over.
	Rules []Rule `json:"rules,omitempty"`
	// Tenants maps toolbus users to their tenant. A user not named here
	// counts in the tenant "" (all such users share it), so a per-tenant
	// limit cannot be escaped by claiming a tenant: the tenant never comes
	// from the batch.
	Tenants map[string]string `json:"tenants,omitempty"`
}

// Rule is one limit.
type Rule struct {
	// Name identifies the rule in results, `toolbus limits` and the admin
	// verbs; ^[A-Za-z0-9_-]{1,64}$, unique.
	Name string `json:"name"`
	// Tools are the tools the rule counts; empty means every tool.
	Tools []string `json:"tools,omitempty"`
	// Writes, when true, restricts the rule to tools that are not
	// read_only, so write tools can have lower limits than reads.
	Writes bool `json:"writes,omitempty"`
	// Per lists what the rule counts separately: any of tool, user,
	// session, tenant. Empty means one count for every matching call.
	Per []string `json:"per,omitempty"`
	// Rate, when set, bounds calls per interval.
	Rate *Rate `json:"rate,omitempty"`
	// Budget, when set, bounds units per UTC day.
	Budget *Budget `json:"budget,omitempty"`
	// CacheHits, when true, counts calls the result cache answers too.
	// By default a hit runs nothing and costs nothing, so no rule counts
	// it (docs/guardrails.md "When a call counts").
	CacheHits bool `json:"cache_hits,omitempty"`
}

// Rate allows Calls per IntervalMS on average, and up to Burst at once.
type Rate struct {
	Calls      int   `json:"calls"`
	IntervalMS int64 `json:"interval_ms"`
	// Burst is how many calls may come at once after a quiet spell; zero
	// means Calls.
	Burst int `json:"burst,omitempty"`
}

// Budget allows Units per UTC day; every call costs Cost units.
type Budget struct {
	Units int64 `json:"units"`
	// Cost is what one call costs; zero means 1.
	Cost int64 `json:"cost,omitempty"`
}

// emission is the GCRA's interval between two calls at the steady rate.
func (r *Rate) emission() time.Duration {
	return time.Duration(r.IntervalMS) * time.Millisecond / time.Duration(r.Calls)
}

// tolerance is how far ahead of now the theoretical arrival time may be.
func (r *Rate) tolerance() time.Duration {
	return r.emission() * time.Duration(r.Burst-1)
}

// Check validates the configuration and applies defaults. It changes
// nothing when it returns an error.
func (c *Policy) Check() error {
	if len(c.Rules) > MaxRules {
		return fmt.Errorf("limits: %d rules, at most %d", len(c.Rules), MaxRules)
	}
	seen := map[string]bool{}
	rules := slices.Clone(c.Rules)
	for i := range rules {
		r := &rules[i]
		if err := r.check(); err != nil {
			return err
		}
		if seen[r.Name] {
			return fmt.Errorf("limits: rule %s is defined twice", r.Name)
		}
		seen[r.Name] = true
	}
	c.Rules = rules
	return nil
}

func (r *Rule) check() error {
	if !bus.ValidName(r.Name) {
		return fmt.Errorf("limits: rule name %q must match ^[A-Za-z0-9_-]{1,64}$", r.Name)
	}
	for _, t := range r.Tools {
		if !bus.ValidName(t) {
			return fmt.Errorf("limits: rule %s: tool name %q must match ^[A-Za-z0-9_-]{1,64}$", r.Name, t)
		}
	}
	for _, p := range r.Per {
		if !slices.Contains(dimensions, p) {
			return fmt.Errorf("limits: rule %s: per %q must be one of tool, user, session, tenant", r.Name, p)
		}
	}
	if r.Rate == nil && r.Budget == nil {
		return fmt.Errorf("limits: rule %s has neither a rate nor a budget", r.Name)
	}
	if r.Rate != nil {
		rt := *r.Rate
		if rt.Burst == 0 {
			rt.Burst = rt.Calls
		}
		switch {
		case rt.Calls <= 0 || rt.IntervalMS <= 0 || rt.Burst <= 0:
			return fmt.Errorf("limits: rule %s: a rate needs calls > 0, interval_ms > 0 and burst >= 0", r.Name)
		case rt.emission() <= 0:
			return fmt.Errorf("limits: rule %s: %d calls per %d ms is finer than a nanosecond", r.Name, rt.Calls, rt.IntervalMS)
		case rt.emission()*time.Duration(rt.Burst) > MaxRateSpan:
			return fmt.Errorf("limits: rule %s: interval_ms / calls * burst is past %v; use a budget for that", r.Name, MaxRateSpan)
		}
		r.Rate = &rt
	}
	if r.Budget != nil {
		b := *r.Budget
		if b.Cost == 0 {
			b.Cost = 1
		}
		if b.Units <= 0 || b.Cost < 0 {
			return fmt.Errorf("limits: rule %s: a budget needs units > 0 and cost >= 0", r.Name)
		}
		r.Budget = &b
	}
	return nil
}

// matches reports whether the rule counts call c.
func (r *Rule) matches(c Call) bool {
	if r.Writes && c.ReadOnly || c.CacheHit && !r.CacheHits {
		return false
	}
	return len(r.Tools) == 0 || slices.Contains(r.Tools, c.Tool)
}
