package security

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/security"
)

// TestAttackDefinitionsFillListings (session 34, red team): a worker login
// confined to two tools of its own defines them with descriptions of 5 MiB
// each (or a large title, or thousands of groups; schemas are bounded): every session lists a tool
// (these have no groups: basic), a listing is one message, and past the
// max payload (8 MiB here) every session's listing failed limit_exceeded,
// so no agent of the deployment had its tools. Now a definition's encoding
// is at most registry.MaxDefinition bytes (128 KiB), else rejected; every
// listing goes on.
func TestAttackDefinitionsFillListings(t *testing.T) {
	sp := spec
	sp.Workers = []security.Handler{{Name: "big", Tools: []string{"big0", "big1", "big2", "big3"}}}
	d := newDeploymentOf(t, sp)
	w := d.conn("worker-big")
	groups := make([]string, 3000)
	for i := range groups {
		groups[i] = fmt.Sprintf("g%063d", i)
	}
	schema := json.RawMessage(`{"type":"object","properties":{"x":{"type":"string","description":"` + strings.Repeat("s", 5<<20) + `"}}}`)
	for i, def := range []bus.ToolDef{
		{Description: strings.Repeat("d", 5<<20)},
		{Title: strings.Repeat("t", 1<<20), Description: strings.Repeat("d", 4<<20)},
		{Description: "Many groups.", Groups: groups},
		{Description: "A large schema.", InputSchema: schema}, // refused before (schemas: 64 KiB)
	} {
		def.Name, def.External = fmt.Sprintf("big%d", i), true
		if def.InputSchema == nil {
			def.InputSchema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		ack, data := register(t, w, "big", def)
		if len(ack.Accepted) != 0 || len(ack.Rejected) != 1 || i < 3 && !strings.Contains(ack.Rejected[0].Reason, "bytes encoded") {
			t.Errorf("a definition of big%d past %d bytes: %s", i, 128<<10, data[:min(len(data), 300)])
		}
	}
	l, err := d.conn("session-s1").client().Tools(testCtx(t), "s1", "", nil)
	if err != nil { // before: limit_exceeded, the listing past the max payload
		t.Fatalf("s1's listing: %v", err)
	}
	if ack, data := register(t, w, "big", bus.ToolDef{Name: "big0", Description: strings.Repeat("d", 8<<10), External: true,
		InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}); len(ack.Accepted) != 1 {
		t.Fatalf("an 8 KiB description: %s", data)
	}
	l, err = d.conn("session-s1").client().Tools(testCtx(t), "s1", "", nil)
	must(t, err)
	if len(l.Tools) != 1 {
		t.Fatalf("s1 lists %d tools, want big0 alone", len(l.Tools))
	}
}

// TestAttackGroupDefinitionsFillListings (session 34, red team): the same
// with group definitions. A worker login that may define groups (every
// group for a worker of every tool) defines two with descriptions of 4 MiB;
// every listing names every defined group with its description, so s1's
// listing would be past the max payload (limit_exceeded). A group's JSON is
// bounded as a tool's (registry.MaxDefinition): both are refused and the
// listing goes on.
func TestAttackGroupDefinitionsFillListings(t *testing.T) {
	d := newDeployment(t)
	w := d.conn("worker")
	for i := range 2 {
		ev, err := bus.NewEvent(bus.TypeRegister, "toolbus/worker/big", bus.Register{Worker: "big",
			Groups: []bus.Group{{Name: fmt.Sprintf("g%d", i), Description: strings.Repeat("d", 4<<20), Scope: bus.ScopeMeta}}})
		must(t, err)
		m, err := bus.SendRequest(testCtx(t), w.nc, bus.NewSubjects("").Workers.RegisterGroup(fmt.Sprintf("g%d", i)), ev)
		must(t, err)
		re, err := bus.Decode(m)
		must(t, err)
		var ack bus.RegisterAck
		if re.DataAs(&ack) != nil || len(ack.Accepted) != 0 || len(ack.Rejected) != 1 || !strings.Contains(ack.Rejected[0].Reason, "bytes encoded") {
			t.Fatalf("a group of 4 MiB: %s %s, want it rejected", re.Type, m.Data[:min(len(m.Data), 300)])
		}
	}
	if _, err := d.conn("session-s1").client().Tools(testCtx(t), "s1", "", nil); err != nil {
		t.Fatalf("s1's listing after two groups of 4 MiB: %v", err)
	}
}
