package main

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/toolbus/toolbus/cmd/toolbus-bench/soak"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestSoakSmoke runs a 15-second soak: 2 router and 3 toolworker processes
// (built from this module) on a 3-node cluster, a worker and a router
// SIGKILLed and restarted, and nothing lost or duplicated. It builds
// binaries and takes a minute or two, so it runs only with TOOLBUS_SOAK=1:
//
//	TOOLBUS_SOAK=1 go test -race -run TestSoakSmoke -v ./cmd/toolbus-bench
func TestSoakSmoke(t *testing.T) {
	if os.Getenv("TOOLBUS_SOAK") == "" {
		t.Skip("set TOOLBUS_SOAK=1 to run the soak smoke test (builds router and toolworker, about a minute)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	var stdout, stderr testkit.Buffer
	err := run(ctx, []string{"soak", "--duration", "15s", "--fault-every", "5s", "--json", "-v"}, &stdout, &stderr)
	t.Logf("stderr:\n%s", stderr.String())
	var rep soak.Report
	if jerr := json.Unmarshal([]byte(stdout.String()), &rep); jerr != nil {
		t.Fatalf("report %q: %v (soak: %v)", stdout.String(), jerr, err)
	}
	if err != nil {
		t.Errorf("soak: %v\n%s", err, stdout.String())
	}
	t.Logf("%d calls, %d completed, %d re-sends, errors %v, p50 %.1f ms, p99 %.1f ms, faults %+v",
		rep.Calls, rep.Completed, rep.Resends, rep.Errors, rep.P50MS, rep.P99MS, rep.Faults)
	if rep.Lost != 0 || rep.Duplicated != 0 || rep.ParkedLost != 0 || rep.WrongResults != 0 || rep.BatchDoneMissing != 0 {
		t.Errorf("lost %d, duplicated %d, parked lost %d, wrong %d, no batch.done %d: %+v",
			rep.Lost, rep.Duplicated, rep.ParkedLost, rep.WrongResults, rep.BatchDoneMissing, rep.Problems)
	}
	kinds := map[string]bool{}
	for _, f := range rep.Faults {
		if f.Error != "" {
			t.Errorf("fault %+v failed", f)
		}
		kinds[f.Kind] = true
	}
	if !kinds["kill_worker"] || !kinds["kill_router"] {
		t.Errorf("faults %+v: want a worker and a router killed", rep.Faults)
	}
	if rep.Calls < 50 || rep.Completed+rep.Lost != rep.Calls {
		t.Errorf("calls %d, completed %d, lost %d", rep.Calls, rep.Completed, rep.Lost)
	}
	for name, k := range rep.ByKind {
		if k.Calls == 0 || k.Succeeded == 0 {
			t.Errorf("kind %s: %+v: every kind should have run and succeeded at least once", name, k)
		}
	}
	if rep.Effects == 0 {
		t.Error("no effect was recorded")
	}
}
