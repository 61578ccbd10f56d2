package soak

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
