package main

import (
	"slices"
	"strings"
	"testing"
)

func TestNearest(t *testing.T) {
	names := []string{"get_current_time", "echo", "todo_write", "read_file", "write_file"}
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"get_curent_time", []string{"get_current_time"}},
		{"Echo", []string{"echo"}},
		{"ecoh", []string{"echo"}},
		{"write_fil", []string{"write_file"}},
		{"deploy", nil},
		{"", nil},
	} {
		if got := nearest(tc.name, names); !slices.Equal(got, tc.want) {
			t.Errorf("nearest(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCallSuggestsATool: calling a misspelt tool says which one was meant.
func TestCallSuggestsATool(t *testing.T) {
	d := newDeployment(t)
	_, errOut, err := exec(t.Context(), "call", "get_curent_time", "{}", "--nats", d.url)
	if err == nil || !strings.Contains(errOut, `no tool "get_curent_time": did you mean get_current_time?`) {
		t.Fatalf("err %v, stderr %q", err, errOut)
	}
}
