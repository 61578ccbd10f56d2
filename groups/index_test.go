package groups

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/registry"
)

// hitsOf is a search of ti as tool names with exact scores.
func hitsOf(ti *toolIndex, query string) []string {
	var out []string
	for _, h := range ti.ix.Search(query, 20, nil) {
		out = append(out, fmt.Sprintf("%s=%v", ti.tools[h.Doc].Def.Name, h.Score))
	}
	return out
}

var indexWords = []string{"create", "read", "issue", "file", "weather", "forecast", "mail", "send", "the", "a", "invoice", "payment"}

// TestToolIndexSyncRanksAsRebuilt: whatever tools come, go, change their
// definition, and whatever groups change their description, come or go,
// the index kept up to date by sync ranks every query exactly as one
// built from scratch from the same tools and groups; a sync with nothing
// changed (a worker's beat) leaves the ranking as it was.
func TestToolIndexSyncRanksAsRebuilt(t *testing.T) {
	for seed := range uint64(10) {
		r := rand.New(rand.NewPCG(seed, 3))
		text := func(n int) string {
			s := ""
			for range n {
				s += indexWords[r.IntN(len(indexWords))] + " "
			}
			return s
		}
		groups := []bus.Group{{Name: "g0", Description: text(3)}, {Name: "g1", Description: text(3)}}
		var tools []*registry.Tool
		next := 0
		newTool := func(name string) *registry.Tool {
			return &registry.Tool{Def: bus.ToolDef{Name: name, Description: text(1 + r.IntN(6)), Groups: []string{fmt.Sprintf("g%d", r.IntN(3))},
				InputSchema: []byte(`{"type":"object","properties":{"` + indexWords[r.IntN(len(indexWords))] + `":{}}}`)}}
		}
		ti := newToolIndex()
		for step := range 60 {
			switch op := r.IntN(10); {
			case op < 4 || len(tools) == 0:
				tools = append(tools, newTool(fmt.Sprintf("tool_%d", next)))
				next++
			case op < 6:
				i := r.IntN(len(tools))
				tools = slices.Delete(tools, i, i+1)
			case op < 8:
				i := r.IntN(len(tools))
				tools[i] = newTool(tools[i].Def.Name) // a new definition
			case op < 9:
				groups = slices.Clone(groups)
				groups[r.IntN(len(groups))].Description = text(3)
			default:
				if len(groups) == 2 {
					groups = append(slices.Clone(groups), bus.Group{Name: "g2", Description: text(2)})
				} else {
					groups = groups[:2:2]
				}
			}
			order := slices.Clone(tools)
			r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			ti.sync(order, uint64(step), groups)
			fresh := newToolIndex()
			fresh.sync(tools, uint64(step), groups)
			for _, q := range []string{"create issue", "weather forecast", "the", "send mail invoice", "g0", "payment"} {
				if got, want := hitsOf(ti, q), hitsOf(fresh, q); !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d %q:\nincremental %v\nrebuilt     %v", seed, step, q, got, want)
				}
			}
			if ti.ix.Len() != len(tools) || len(ti.ids) != len(tools) {
				t.Fatalf("seed %d step %d: %d documents, %d ids, %d tools", seed, step, ti.ix.Len(), len(ti.ids), len(tools))
			}
		}
		// A beat: the same tools and groups; no document is indexed again.
		before := slices.Clone(ti.ix.Search("the", 1000, nil))
		ti.sync(tools, 1000, groups)
		if after := ti.ix.Search("the", 1000, nil); !slices.Equal(before, after) {
			t.Fatalf("a sync without changes changed the index")
		}
	}
}

// BenchmarkToolIndexChange10k is what search_tools pays after one tool's
// definition changed among 10,000 in 100 groups: sync over the registry's
// listing (the listing itself is the registry's):
// go test -run - -bench ToolIndexChange10k ./groups/
func BenchmarkToolIndexChange10k(b *testing.B) {
	var gs []bus.Group
	for g := range 100 {
		gs = append(gs, bus.Group{Name: fmt.Sprintf("g%d", g), Description: fmt.Sprintf("The %s and %s tools.", indexWords[g%12], indexWords[(g/12)%12]), Scope: bus.ScopeMeta})
	}
	tools := make([]*registry.Tool, 10000)
	for n := range tools {
		tools[n] = &registry.Tool{Def: bus.ToolDef{Name: fmt.Sprintf("mcp__srv%d__%s_%s_%d", n/100, indexWords[n%12], indexWords[(n/12)%12], n),
			Description: fmt.Sprintf("%s the %s of a %s.", indexWords[(n*7)%12], indexWords[(n*3)%12], indexWords[(n*11)%12]),
			InputSchema: []byte(`{"type":"object","properties":{"id":{"type":"string"},"body":{"type":"string"}}}`), Groups: []string{fmt.Sprintf("g%d", n/100)}}}
	}
	ti := newToolIndex()
	ti.sync(slices.Clone(tools), 0, gs)
	b.Run("one definition", func(b *testing.B) {
		i := 0
		for b.Loop() {
			t := *tools[i%len(tools)]
			t.Def.Description = fmt.Sprintf("version %d of the tool.", i)
			tools[i%len(tools)] = &t
			ti.sync(slices.Clone(tools), uint64(i+1), gs) // a new listing, as Registry.Tools returns
			i++
		}
	})
	b.Run("one group's description (100 tools)", func(b *testing.B) {
		i := 0
		for b.Loop() {
			gs = slices.Clone(gs)
			gs[i%len(gs)].Description = fmt.Sprintf("Group version %d.", i)
			ti.sync(slices.Clone(tools), uint64(i+1), gs)
			i++
		}
	})
	b.Run("rebuild (the previous revision)", func(b *testing.B) {
		for b.Loop() {
			newToolIndex().sync(tools, 0, gs)
		}
	})
}
