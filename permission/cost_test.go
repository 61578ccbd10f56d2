package permission_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/permission"
)

// costContexts are the permission contexts a command's decision is
// measured in: no rule (an ask with suggestions), a deny rule (bypass:
// the programs are read), an allow rule covering every part.
var costContexts = []struct {
	name string
	pc   permission.Context
}{
	{"none", permission.Context{}},
	{"deny", permission.Context{Mode: permission.Bypass, Rules: []bus.Rule{{Tool: "shell", Pattern: "rm:*", Behavior: permission.Deny}}}},
	{"allow", permission.Context{Rules: []bus.Rule{{Tool: "shell", Pattern: "ls:*"}}}},
}

// BenchmarkDecideCommand measures a command tool's decision per byte of
// its command ("ls; " repeated), the cost an agent's long commands put on
// the router (docs/security.md).
func BenchmarkDecideCommand(b *testing.B) {
	def := &bus.ToolDef{Name: "shell", RuleMatcher: bus.MatcherCommand, RuleField: "command"}
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		cmd := strings.Repeat("ls; ", size/4)
		in, _ := json.Marshal(map[string]string{"command": cmd})
		for _, c := range costContexts {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, c.name), func(b *testing.B) {
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				start := time.Now()
				for b.Loop() {
					permission.Decide(c.pc, def, in)
				}
				elapsed := time.Since(start)
				runtime.ReadMemStats(&m1)
				n := float64(b.N) * float64(size)
				b.ReportMetric(float64(elapsed.Nanoseconds())/n, "ns/byte")
				b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/n, "B/byte")
			})
		}
	}
}
