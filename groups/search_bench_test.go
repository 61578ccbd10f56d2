package groups_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/store"
)

// BenchmarkSearch10kRegistered is search_tools over 10,000 tools
// registered in the registry (100 meta groups of 100), the index already
// built: go test -run - -bench Search10kRegistered -benchtime 200x ./groups/
func BenchmarkSearch10kRegistered(b *testing.B) {
	js := testkit.JetStream(b, testkit.Connect(b, testkit.RunServer(b)))
	// 10,000 tools: past the catalogue's default bound (protocol 1.25).
	st, err := store.Setup(b.Context(), js, bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: time.Minute, MaxTools: -1})
	if err != nil {
		b.Fatal(err)
	}
	s := groups.New(st, groups.Config{Search: true})
	if err := s.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer s.Stop(b.Context())
	r := registry.New(st, registry.Config{Heartbeat: time.Minute})
	if err := r.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer r.Stop(b.Context())
	words := []string{"create", "read", "update", "delete", "list", "issue", "file", "user", "invoice", "weather", "ticket", "repo", "branch", "email", "calendar", "event", "order", "payment", "report", "chart"}
	var defs []bus.ToolDef
	for g := range 100 {
		if err := s.Put(b.Context(), bus.Group{Name: fmt.Sprintf("g%d", g), Description: fmt.Sprintf("The %s and %s tools.", words[g%20], words[(g/20)%20]), Scope: bus.ScopeMeta}); err != nil {
			b.Fatal(err)
		}
		for i := range 100 {
			n := g*100 + i
			defs = append(defs, bus.ToolDef{Name: fmt.Sprintf("mcp__srv%d__%s_%s_%d", g, words[n%20], words[(n/20)%20], n),
				Description: fmt.Sprintf("%s the %s of a %s.", words[(n*7)%20], words[(n*3)%20], words[(n*11)%20]),
				InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"},"body":{"type":"string"}}}`), Groups: []string{fmt.Sprintf("g%d", g)}})
		}
	}
	for i := 0; i < len(defs); i += 500 {
		if ack, err := r.Register(b.Context(), registry.Shared, "", bus.Register{Worker: "w", Tools: defs[i : i+500]}); err != nil || len(ack.Rejected) > 0 {
			b.Fatal(err, ack.Rejected)
		}
	}
	view := s.View(r, s.Session("s"), nil)
	in := json.RawMessage(`{"query":"create an invoice for a payment","limit":10}`)
	start := time.Now()
	if _, err := view.Search(b.Context(), "s", in, nil); err != nil { // builds the index
		b.Fatal(err)
	}
	b.Logf("first search (builds the index of %d tools): %v", len(r.Tools()), time.Since(start))
	b.ResetTimer()
	for b.Loop() {
		if _, err := view.Search(b.Context(), "s", in, nil); err != nil {
			b.Fatal(err)
		}
	}
}
