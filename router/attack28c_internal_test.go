package router

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/parked"
)

// BenchmarkParkedPages10k (red team 28c): the cost of the 16 pages an
// inbox reads per poll at 10,000 parked calls of 1 KiB inputs (1 MiB
// pages); parkedPage sorts every record for every page.
func BenchmarkParkedPages10k(b *testing.B) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	input, _ := json.Marshal(map[string]string{"x": strings.Repeat("x", 1<<10)})
	recs := make([]*parked.Record, 10_000)
	for i := range recs {
		recs[i] = &parked.Record{Session: fmt.Sprintf("s%d", i%50), ReplyID: fmt.Sprintf("r%d", i), Call: bus.Call{ID: "c1", Name: "ask", Input: input},
			Kind: bus.KindConfirm, Status: bus.ParkParked, Created: t0.Add(time.Duration(i%977) * time.Second), Expires: t0.Add(time.Hour), Rev: uint64(i + 1)}
	}
	for b.Loop() {
		after := parkedCursor{}
		for range 16 {
			page := parkedPage(slices.Clone(recs), after, 0, 1<<20)
			if page.Next == "" {
				break
			}
			var err error
			if after, err = parseParkedCursor(page.Next); err != nil {
				b.Fatal(err)
			}
		}
	}
}
