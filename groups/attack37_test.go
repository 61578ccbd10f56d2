package groups_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/registry"
)

// TestAttack37ManyRequestToolsCostNoScan (session 37, red team): a tools
// query declares 1,000 request-scoped tools (the most 1,000 subschemas
// allow, about 60 KB). Whether each of the 4,000 registered tools is
// shadowed was a scan of the 1,000: 4 million name comparisons a listing,
// about 10 ms of router CPU for each such query (0.5 ms with one tool). A
// listing and a search with 1,000 request-scoped tools must cost about
// what they cost with one (the best of ten, within 4 times).
func TestAttack37ManyRequestToolsCostNoScan(t *testing.T) {
	st := newStore(t)
	s := start(t, st, groups.Config{Search: true})
	put(t, s, bus.Group{Name: "g", Description: "Registered tools.", Scope: bus.ScopeMeta})
	r := registry.New(st, registry.Config{})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, r.Stop)
	var defs []bus.ToolDef
	for n := range 4000 {
		defs = append(defs, bus.ToolDef{Name: fmt.Sprintf("registered_tool_%d", n), Description: "A registered tool.",
			InputSchema: json.RawMessage(`{"type":"object"}`), Groups: []string{"g"}})
	}
	for i := 0; i < len(defs); i += 500 {
		if ack, err := r.Register(t.Context(), registry.Shared, "", bus.Register{Worker: "w", Tools: defs[i : i+500]}); err != nil || len(ack.Rejected) > 0 {
			t.Fatal(err, ack.Rejected)
		}
	}
	request := func(n int) *groups.Request {
		var tools []bus.ExternalTool
		for i := range n {
			tools = append(tools, bus.ExternalTool{Name: fmt.Sprintf("registered_tool_x%d", i), InputSchema: json.RawMessage(`{"type":"object"}`)})
		}
		req, err := groups.CheckRequest(&bus.Request{ExternalTools: tools})
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	in := json.RawMessage(`{"query":"registered tool","limit":50}`)
	views := []*groups.View{s.View(r, s.Session("s"), request(1)), s.View(r, s.Session("s"), request(1000))}
	best := []time.Duration{time.Hour, time.Hour}
	for range 10 { // interleaved, so that both see the machine's load alike
		for i, view := range views {
			start := time.Now()
			view.Tools()
			if _, err := view.Search(t.Context(), "s", in, nil); err != nil {
				t.Fatal(err)
			}
			best[i] = min(best[i], time.Since(start))
		}
	}
	one, many := best[0], best[1]
	t.Logf("a listing and a search: %v with 1 request-scoped tool, %v with 1,000", one, many)
	if many > 4*one {
		t.Fatalf("1,000 request-scoped tools cost %v, one %v: a scan per registered tool", many, one)
	}
}

// TestAttack37ResetToolsHugeInput (session 37, red team): a batch of 1 MB
// calls reset_tools with one group named 55,000 times (a repeated key: the
// last value counts). Its schema's check costs 2 ms, but reset_tools read
// every member with a JSON tokenizer and matched each against every meta
// group: 56-160 ms of router CPU a batch (10 to 200 groups). An input with
// more members than the meta groups and a margin is invalid_input, read no
// further; one naming each group once, even twice, still resets.
func TestAttack37ResetToolsHugeInput(t *testing.T) {
	_, s := resetFixture(t)
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; b.Len() < 1_000_000; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"web":true`)
	}
	b.WriteByte('}')
	start := time.Now()
	text, err := s.Reset(t.Context(), "s1", json.RawMessage(b.String()))
	took := time.Since(start)
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeInvalidInput || !strings.Contains(be.Message, "more members than there are groups") {
		t.Fatalf("a reset of 1 MB naming web 90,000 times over: %q %v (%v)", text, err, took)
	}
	t.Logf("refused in %v", took)
	if text, err := s.Reset(t.Context(), "s1", json.RawMessage(`{"web":false,"db":true,"web":true,"db":true}`)); err != nil || !strings.Contains(text, "web, db") {
		t.Fatalf("each group named twice: %q %v", text, err)
	}
}
