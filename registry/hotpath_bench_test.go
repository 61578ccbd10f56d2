package registry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/store"
)

// BenchmarkResolveReads is what the router's hot path asks the registry
// per call (Lookup, Live, ExecForm, MayHold), from every core at once,
// over 100 tools with 3 live workers each, while one goroutine keeps
// registering (beats: writes of the liveness). The heartbeat is a
// minute, so that workers stay live however long a loaded machine takes.
//
//	go test -run - -bench ResolveReads -benchtime 2s ./registry/
func BenchmarkResolveReads(b *testing.B) {
	r := benchRegistry(b)
	var tools []bus.ToolDef
	for i := range 100 {
		tools = append(tools, def(fmt.Sprintf("tool%d", i)))
	}
	for w := range 3 {
		if _, err := r.Register(b.Context(), registry.Shared, "", bus.Register{Worker: fmt.Sprintf("w%d", w), Tools: tools, InFlight: map[string][]string{}}); err != nil {
			b.Fatal(err)
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // beats while the reads run
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = r.Register(b.Context(), registry.Shared, "", bus.Register{Worker: "w0", Tools: tools, InFlight: map[string][]string{}})
		}
	}()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			name := tools[i%len(tools)].Name
			t, ok := r.Lookup(name)
			if !ok || !r.Live(t) {
				b.Error("a registered tool is not live")
				return
			}
			_ = r.ExecForm(name)
			_ = r.MayHold(name, "s.r.c")
			i++
		}
	})
	b.StopTimer()
	close(stop)
	<-done
}

// benchRegistry is a started Registry of a minute's heartbeat on a memory store.
func benchRegistry(b *testing.B) *registry.Registry {
	nc := testkit.Connect(b, testkit.RunServer(b))
	st, err := store.Setup(b.Context(), testkit.JetStream(b, nc), bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	r := registry.New(st, registry.Config{Heartbeat: time.Minute})
	if err := r.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Stop(context.WithoutCancel(b.Context())) })
	return r
}
