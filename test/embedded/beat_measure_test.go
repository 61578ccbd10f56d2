package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestMeasureBeatCost measures what a heartbeat of a worker of many tools
// costs since protocol 1.12 (docs/protocol.md 7.1): one request per tool
// on P.register.<tool>, sent at once, against the one request of 1.11 on
// P.register that held every definition. It reports the wall time of the
// first registration (its requests in order, as the SDKs send it), of a
// beat (send to last ack) and the process CPU per beat (router, server and
// sender share the process). TOOLBUS_MEASURE=1 runs it.
func TestMeasureBeatCost(t *testing.T) {
	if os.Getenv("TOOLBUS_MEASURE") != "1" {
		t.Skip("TOOLBUS_MEASURE=1 runs the measurement")
	}
	e := newEnv(t, 1)
	for _, n := range []int{10, 100} {
		for _, perTool := range []bool{false, true} {
			worker := fmt.Sprintf("m%d-%v", n, perTool)
			var defs []bus.ToolDef
			for i := range n {
				defs = append(defs, bus.ToolDef{Name: fmt.Sprintf("beat_%s_%d", worker, i), Description: "A tool of the beat measurement.",
					InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)})
			}
			beat := func(inOrder bool) {
				ctx, cancel := context.WithTimeout(t.Context(), bound)
				defer cancel()
				send := func(subject string, reg bus.Register) {
					ev, err := bus.NewEvent(bus.TypeRegister, "test/measure", reg)
					if err != nil {
						t.Error(err)
						return
					}
					m, err := ev.Msg(subject)
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := e.nc.RequestMsgWithContext(ctx, m); err != nil {
						t.Error(err)
					}
				}
				if !perTool {
					send(e.client.Subjects().Workers.SharedRegister(), bus.Register{Worker: worker, Tools: defs, InFlight: map[string][]string{}})
					return
				}
				var wg sync.WaitGroup
				for _, d := range defs {
					one := func() {
						send(e.client.Subjects().Workers.Register(d.Name), bus.Register{Worker: worker, Tools: []bus.ToolDef{d},
							InFlight: map[string][]string{d.Name: {}}})
					}
					if inOrder { // the SDKs' first registration: in order
						one()
						continue
					}
					wg.Go(one)
				}
				wg.Wait()
			}
			t0 := time.Now()
			beat(true) // the first registration stores the definitions
			first := time.Since(t0)
			const beats = 30
			cpu0 := testkit.ProcessCPU()
			t0 = time.Now()
			for range beats {
				beat(false)
			}
			wall, cpu := time.Since(t0), testkit.ProcessCPU()-cpu0
			msgs := 1
			if perTool {
				msgs = n
			}
			t.Logf("%3d tools, %3d request(s) a beat (%s): first registration %6.1f ms; %6.2f ms a beat, %6.2f ms CPU a beat", n, msgs,
				map[bool]string{false: "1.11 P.register", true: "1.12 P.register.<tool>"}[perTool],
				float64(first.Microseconds())/1e3, float64(wall.Microseconds())/1e3/beats, float64(cpu.Microseconds())/1e3/beats)
		}
	}
}
