package soak

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/cli"
)

// TestKinds: every kind of call has a tool, a positive weight and an input
// whose expected text is set; pickKind returns each kind with some seed.
func TestKinds(t *testing.T) {
	seen := map[string]bool{}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		seen[pickKind(r).name] = true
	}
	for i := range soakKinds {
		k := &soakKinds[i]
		if k.tool == "" || k.weight <= 0 || k.input == nil {
			t.Errorf("kind %q: tool %q, weight %d, input set %v", k.name, k.tool, k.weight, k.input != nil)
		}
		if in, _ := k.input(r, "c1"); len(in) == 0 {
			t.Errorf("kind %q: empty input", k.name)
		}
		if !seen[k.name] {
			t.Errorf("kind %q never picked in 10000 draws", k.name)
		}
	}
}

// TestReadEffects: effect lines are counted per call key; a line cut by a
// kill and a missing file count nothing.
func TestReadEffects(t *testing.T) {
	dir := t.TempDir()
	if got, err := readEffects(filepath.Join(dir, "none")); err != nil || len(got) != 0 {
		t.Fatalf("missing file: %v, %v", got, err)
	}
	p := filepath.Join(dir, "effects")
	lines := `{"key":"a"}` + "\n" + `{"key":"a","repeat":true}` + "\n" + `{"key":"b"}` + "\n" + `{"ke`
	if err := os.WriteFile(p, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readEffects(p)
	if err != nil || len(got["a"]) != 2 || len(got["b"]) != 1 || len(got) != 2 {
		t.Fatalf("readEffects = %v, %v", got, err)
	}
}

func TestPercentiles(t *testing.T) {
	for _, tc := range []struct {
		in       []time.Duration
		p50, p99 float64
	}{
		{nil, 0, 0},
		{[]time.Duration{time.Millisecond}, 1, 1},
		{[]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}, 2, 3}, // nearest rank
	} {
		if p50, p99 := percentiles(tc.in); p50 != tc.p50 || p99 != tc.p99 {
			t.Errorf("percentiles(%v) = %v, %v, want %v, %v", tc.in, p50, p99, tc.p50, tc.p99)
		}
	}
}

// TestBinariesFromBin: --bin must hold both executables.
func TestBinariesFromBin(t *testing.T) {
	_, _, err := cli.Helpers(t.Context(), t.TempDir(), t.TempDir(), func(string, ...any) {}, "router", "toolworker")
	if err == nil || !strings.Contains(err.Error(), "router and toolworker") {
		t.Fatalf("err = %v", err)
	}
}

// TestBatchDoneMissing: a completed batch without its batch.done fails the
// soak unless protocol 3.4 allows it: a batch whose batch.done may go out
// unawaited (nothing parks, nothing durable) that completed during a fault.
func TestBatchDoneMissing(t *testing.T) {
	start := time.Now()
	kind := func(name string) *soakKind {
		i := slices.IndexFunc(soakKinds, func(k soakKind) bool { return k.name == name })
		return &soakKinds[i]
	}
	faults := []soakFault{{AtMS: 10_000, Kind: "stop_nats_node", DownMS: 6_000}}
	for _, tt := range []struct {
		name    string
		kinds   []string
		at      time.Duration // the last result, since the start
		done    bool
		missing int
		allowed int
	}{
		{"stored", []string{"read_only"}, 12 * time.Second, true, 0, 0},
		{"read-only during a fault", []string{"read_only", "slow_effect"}, 12 * time.Second, false, 0, 1},
		{"just before the fault", []string{"side_effect"}, 8500 * time.Millisecond, false, 0, 1},
		{"just after the fault", []string{"read_only"}, 20 * time.Second, false, 0, 1},
		{"read-only, no fault near", []string{"read_only"}, 40 * time.Second, false, 1, 0},
		{"parked during a fault", []string{"read_only", "parked_confirm"}, 12 * time.Second, false, 1, 0},
		{"durable during a fault", []string{"durable"}, 12 * time.Second, false, 1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := &soakTracker{start: start, calls: map[string]*soakCall{}, bats: map[string]*soakBatch{}}
			b := &soakBatch{session: "s", reply: "r", first: start, done: tt.done}
			for i, k := range tt.kinds {
				id := fmt.Sprint("c", i)
				b.calls = append(b.calls, &soakCall{key: "s.r." + id, id: id, kind: kind(k), batch: b, seen: map[string]string{},
					final: &bus.Result{ID: id}, finalAt: start.Add(tt.at)})
			}
			tr.add(b)
			rep := tr.report(nil, faults, time.Minute)
			if rep.BatchDoneMissing != tt.missing || rep.BatchDoneUnstored != tt.allowed {
				t.Fatalf("missing %d, allowed %d; want %d, %d", rep.BatchDoneMissing, rep.BatchDoneUnstored, tt.missing, tt.allowed)
			}
		})
	}
}
