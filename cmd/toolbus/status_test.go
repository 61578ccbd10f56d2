package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

func TestStatus(t *testing.T) {
	d := newDeployment(t)
	// A session stored in KV counts, whichever router holds it.
	if _, _, err := exec(t.Context(), "session", "mode", "explore", "--session", "st1", "--nats", d.url); err != nil {
		t.Fatal(err)
	}
	out, _, err := exec(t.Context(), "status", "--wait", "2s", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"get_current_time", "1 live workers", "router ", "worker ", "store: ok", "groups: basic", "1 stored"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = exec(t.Context(), "status", "--json", "--wait", "2s", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Status    bus.Status `json:"status"`
		Instances []instance `json:"instances"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(v.Status.Tools) == 0 || len(v.Instances) < 2 {
		t.Fatalf("status %+v", v)
	}
	if _, _, err := exec(t.Context(), "status", "extra", "--nats", d.url); err == nil {
		t.Fatal("status with an argument succeeded")
	}
}

func TestStoreLine(t *testing.T) {
	since := time.Date(2026, 12, 1, 10, 41, 34, 0, time.UTC)
	for _, tc := range []struct {
		in   bus.StoreStatus
		want string
	}{
		{bus.StoreStatus{State: "ok"}, "store: ok"},
		{bus.StoreStatus{State: "full", Error: "insufficient resources", Since: &since}, "store: full (JetStream: insufficient resources) since 2026-12-01T10:41:34Z"},
		{bus.StoreStatus{}, "store: unknown (the router does not report it)"},
	} {
		if got := storeLine(tc.in); got != tc.want {
			t.Errorf("storeLine(%+v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "extra"},
		{"bench", "--runs", "2"},              // goes with --cross-process only
		{"bench", "--cpuprofile", "/tmp/x"},   // likewise
		{"bench", "--cross-process", "extra"}, // no arguments either
	} {
		if _, _, err := exec(t.Context(), args...); err == nil {
			t.Errorf("%v succeeded", args)
		}
	}
}
