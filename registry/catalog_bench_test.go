package registry_test

import (
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/registry"
)

// BenchmarkRegisterNewAt4096 is one registration of a new external tool
// (a definition stored, nothing to beat) on a catalogue of 4,096 tools
// (session 35: 0.5 ms at none, 3 ms at 6,000 before).
//
//	go test -run - -bench RegisterNewAt4096 -benchtime 400x ./registry/
func BenchmarkRegisterNewAt4096(b *testing.B) {
	r := benchRegistry(b)
	ext := func(name string) bus.Register {
		d := def(name)
		d.External = true
		return bus.Register{Worker: "w", Tools: []bus.ToolDef{d}}
	}
	for i := range 4096 - 1 {
		if _, err := r.Register(b.Context(), registry.Shared, "", ext(fmt.Sprintf("held%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("new%d", i)
		ack, err := r.Register(b.Context(), name, "", ext(name))
		if err != nil || len(ack.Accepted) != 1 {
			b.Fatal(ack, err)
		}
		b.StopTimer()
		if err := r.Delete(b.Context(), name); err != nil { // the catalogue stays at 4,096
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
