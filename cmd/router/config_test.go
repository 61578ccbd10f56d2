package main

import (
	"encoding/json"
	"flag"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/toolbus/toolbus/store"
)

// The config file's JSON form, which only FuzzParseConfig writes: a
// duration as its Go string, a size as its count of bytes.

func (d duration) MarshalJSON() ([]byte, error) {
	if d == 0 {
		return []byte(`""`), nil
	}
	return json.Marshal(time.Duration(d).String())
}

func (b byteSize) MarshalJSON() ([]byte, error) { return []byte(strconv.FormatInt(int64(b), 10)), nil }

func (b softBound) MarshalJSON() ([]byte, error) {
	if b < 0 {
		return []byte(`"off"`), nil
	}
	return byteSize(b).MarshalJSON()
}

func TestParseConfigLimits(t *testing.T) {
	cfg, err := parseConfig("r.yaml", []byte(`
park_ttl: 2h
limits:
  events_max_age: 12h
  events_max_bytes: 1GiB
  outputs_ttl: 30m
  outputs_max_bytes: 4000000000
  inline_output: 256KiB
  max_output: 32MB
  parked_max_bytes: 1MiB
  ledger_max_bytes: "off"
  mcp_max_bytes: 2MiB
`))
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Limits
	if time.Duration(l.EventsMaxAge) != 12*time.Hour || l.EventsMaxBytes != 1<<30 || time.Duration(l.OutputsTTL) != 30*time.Minute ||
		l.OutputsMaxBytes != 4e9 || l.InlineOutput != 256<<10 || l.MaxOutput != 32e6 || time.Duration(cfg.ParkTTL) != 2*time.Hour {
		t.Fatalf("limits %+v", l)
	}
	// Flags override the file, value by value.
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fl := limitFlags(fs)
	if err := fs.Parse([]string{"--events-max-bytes", "2GiB", "--outputs-ttl", "1h", "--sessions-max-bytes", "off", "--tasks-max-bytes", "3MiB"}); err != nil {
		t.Fatal(err)
	}
	var sc store.Config
	l.override(fl).apply(&sc)
	if sc.EventsMaxBytes != 2<<30 || sc.OutputsTTL != time.Hour || sc.EventsMaxAge != 12*time.Hour || sc.OutputsMaxBytes != 4e9 ||
		sc.ParkedMaxBytes != 1<<20 || sc.SessionsMaxBytes != -1 || sc.LedgerMaxBytes != -1 || sc.TasksMaxBytes != 3<<20 || sc.MCPMaxBytes != 2<<20 {
		t.Fatalf("store config %+v", sc)
	}
	for _, bad := range []string{
		"limits: {events_max_age: 0s}", "limits: {events_max_age: -1h}", "limits: {events_max_age: 5}",
		"limits: {events_max_bytes: 0}", "limits: {events_max_bytes: -5}", "limits: {events_max_bytes: 1XB}",
		"limits: {parked_max_bytes: -5}", "limits: {sessions_max_bytes: 0}", "limits: {max_output: nan}", "limits: {max_output: 1e300}", "limits: {inline: 5}", "limits: [1]",
		"park_ttl: 0s", "park_ttl: -1h", "park_ttl: soon", "park_ttl: 5",
	} {
		if _, err := parseConfig("r.yaml", []byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if err := fs.Parse([]string{"--max-output", "lots"}); err == nil || !strings.Contains(err.Error(), "not a size in bytes") {
		t.Errorf("--max-output lots: %v", err)
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]byteSize{"1": 1, "1024": 1024, "1KiB": 1024, "1 kb": 1000, "1.5MiB": 1572864, "2GB": 2e9, "3b": 3, "1TiB": 1 << 40} {
		if got, err := parseByteSize(in); err != nil || got != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "KiB", "0", "-1", "0.5", "0x10", "1_000", "inf", "1e30GiB", "1 MiBs"} {
		if _, err := parseByteSize(bad); err == nil {
			t.Errorf("parseByteSize(%q) accepted", bad)
		}
	}
}

// FuzzParseConfig: a router config file never panics the parser; one that
// parses encodes (as JSON, which YAML reads) to a file that parses to the
// same configuration.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"groups:\n  - {name: ops, description: Deploy., instructions: Staging first., scope: meta}\n  - {name: admin, scope: external}\npermissions: {mode: default, rules: [{tool: shell, pattern: \"git:*\", behavior: allow}], work_dirs: [/srv]}\npark_ttl: 24h\n",
		"limits: {events_max_age: 24h, events_max_bytes: 1GiB, outputs_ttl: 1h, outputs_max_bytes: 5, inline_output: 1MiB, max_output: 64MiB}\n",
		`{"groups":[{"name":"g","tools":[]}]}`, "park_ttl: -1s", "groups: {a: 1}", "&a [*a, *a]", "- 1", "",
		"permissions: {mode: 5}", "limits: {events_max_bytes: 1e18}", "limits: {parked_max_bytes: \"off\", ledger_max_bytes: 1MiB}", "\t", "groups:\n- name: x\n  scope: \"\"\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := parseConfig("f", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config f: ") {
				t.Fatalf("error without the file name: %v", err)
			}
			return
		}
		enc, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg2, err := parseConfig("f", enc)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", enc, err)
		}
		enc2, _ := json.Marshal(cfg2)
		if string(enc) != string(enc2) || cfg.ParkTTL != cfg2.ParkTTL {
			t.Fatalf("not a fixed point:\n%s\n%s", enc, enc2)
		}
		_, _ = yaml.JSONToYAML(enc)
	})
}

// FuzzByteSize: a size parses to a positive count, and its decimal form
// parses to the same count.
func FuzzByteSize(f *testing.F) {
	for _, s := range []string{"1", "1KiB", "1.5 MiB", "2gb", "1e3", "0", "-1", "nan", "1e400", "9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseByteSize(s)
		if err != nil {
			return
		}
		if n <= 0 {
			t.Fatalf("%q parsed to %d", s, n)
		}
		if m, err := parseByteSize(n.String()); err != nil || m != n {
			t.Fatalf("%q -> %d -> %d, %v", s, n, m, err)
		}
	})
}

// parseByteSize is what byteSize.Set sets.
func parseByteSize(s string) (byteSize, error) {
	var b byteSize
	err := b.Set(s)
	return b, err
}
