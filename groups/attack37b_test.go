package groups_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
)

// TestAttack37bResetToolsManyMetaGroups (session 37, red team b, on
// redteam37's bound): reset_tools reads up to twice the meta groups plus
// 16 members, and each was looked for among the meta groups by a scan, so
// with a catalogue of 1,000 meta groups (max_groups is 1,024) an input
// naming each twice (70 KB) cost about 4 million name comparisons, 14-25
// ms of router CPU a call. The names are looked up in a set: the reset
// costs a few times decoding its input, not twenty.
func TestAttack37bResetToolsManyMetaGroups(t *testing.T) {
	s := start(t, newStore(t), groups.Config{})
	var gs []bus.Group
	for i := range 1000 {
		gs = append(gs, bus.Group{Name: fmt.Sprintf("group-%04d-of-a-large-catalogue", i), Description: "d", Scope: bus.ScopeMeta})
	}
	put(t, s, gs...)
	var b strings.Builder
	b.WriteByte('{')
	for i := range 2000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `%q:true`, gs[i%1000].Name)
	}
	b.WriteByte('}')
	input := json.RawMessage(b.String())
	best := func(f func()) time.Duration {
		var d time.Duration
		for i := range 10 {
			start := time.Now()
			f()
			if took := time.Since(start); i == 0 || took < d {
				d = took
			}
		}
		return d
	}
	var reset, decode time.Duration
	for range 3 { // interleaved
		reset = best(func() {
			if _, err := s.Reset(t.Context(), "s1", input); err != nil {
				t.Fatal(err)
			}
		})
		decode = best(func() {
			var m map[string]bool
			if err := json.Unmarshal(input, &m); err != nil {
				t.Fatal(err)
			}
		})
		if reset < 10*decode {
			t.Logf("reset %v, decoding its input %v", reset, decode)
			return
		}
	}
	t.Fatalf("a reset naming 1,000 meta groups twice took %v, decoding its input %v: more than ten times", reset, decode)
}
