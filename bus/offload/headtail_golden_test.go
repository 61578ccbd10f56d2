package offload_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
)

var update = flag.Bool("update", false, "rewrite testdata/headtail.json")

// headTailCase is one stored text's inline preview: the Python and Java
// SDKs read the same file (python/tests/test_wire.py, OffloaderTest) and
// must write byte-identical previews.
type headTailCase struct {
	Name string `json:"name"`
	Text string `json:"text"`
	Keep int    `json:"keep"`
	URL  string `json:"url"`
	Want string `json:"want"`
}

func headTailCases() []headTailCase {
	url := "nats-object://toolbus_outputs/s1.r1.c1.0123456789abcdef0123456789abcdef.0#sha256=" + strings.Repeat("5e", 32)
	var lines strings.Builder
	for i := 0; lines.Len() < 12000; i++ {
		lines.WriteString("line ")
		lines.WriteString(strings.Repeat("x", i%17))
		lines.WriteString("\n")
	}
	return []headTailCase{
		{Name: "ascii lines", Text: lines.String(), Keep: 2048, URL: url},
		{Name: "two-byte runes", Text: "HEAD" + strings.Repeat("é", 5000) + "TAIL", Keep: 2048, URL: url},
		{Name: "three- and four-byte runes", Text: strings.Repeat("日本語🙂", 900), Keep: 2048, URL: url},
		{Name: "ends with an ellipsis", Text: strings.Repeat("…", 3000), Keep: 1500, URL: url},
		{Name: "small keep", Text: strings.Repeat("abc€", 400), Keep: 100, URL: url},
		{Name: "short text", Text: "ab", Keep: 2048, URL: url},
	}
}

// TestHeadTailGolden pins headTail's texts in testdata/headtail.json
// (go test -run TestHeadTailGolden -update ./bus/offload rewrites it).
func TestHeadTailGolden(t *testing.T) {
	cases := headTailCases()
	for i := range cases {
		c := &cases[i]
		c.Want = offload.HeadTail(c.Text, c.Keep, bus.Block{Type: bus.BlockData, URL: c.URL})
	}
	got, err := json.MarshalIndent(cases, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "headtail.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: rerun with -update", path)
	}
}
