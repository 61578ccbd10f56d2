package main

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestMCPRefusalsCounted (bounds37, session 36's open row): the facade a
// router serves refuses P_mcp's new keys past --mcp-max-bytes, and the
// router's metrics and status counted none (toolbus_store_refused_total
// {bucket="mcp"} stayed 0). Two MCP sessions' client records refused past a
// bound of one byte are counted in both, as the same number.
func TestMCPRefusalsCounted(t *testing.T) {
	dir := t.TempDir()
	m, _ := startRun(t, []string{"--listen", "127.0.0.1:-1", "--data", filepath.Join(dir, "data"), "--heartbeat", "500ms", "--metrics", "127.0.0.1:0",
		"--mcp-listen", "127.0.0.1:0", "--mcp-insecure", "--mcp-max-bytes", "1"},
		regexp.MustCompile(`(?s)metrics on (\S+)\n.*embedded NATS listening on (\S+) .*MCP \(streamable HTTP\) at (\S+)/mcp/<session>`))
	for i := range 2 { // each new MCP session's client record (m.) is refused
		tr, err := transport.NewStreamableHTTP(m[3]+"/mcp/s1", transport.WithHTTPHeaders(map[string]string{"X-Toolbus-User": "alice"}))
		if err != nil {
			t.Fatal(err)
		}
		c := mcpclient.NewClient(tr)
		if err := c.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		init := mcp.InitializeRequest{}
		init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
		init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: strconv.Itoa(i)}
		if _, err := c.Initialize(t.Context(), init); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	metric := regexp.MustCompile(`(?m)^toolbus_store_refused_total\{bucket="mcp"\} (\d+)$`).FindSubmatch(body)
	if metric == nil {
		t.Fatalf("no toolbus_store_refused_total{bucket=\"mcp\"}:\n%s", body)
	}
	if n, _ := strconv.ParseUint(string(metric[1]), 10, 64); n < 2 {
		t.Fatalf("toolbus_store_refused_total{bucket=\"mcp\"} %d, want 2 or more", n)
	}
	var st bus.Status
	if err := client.New(testkit.ConnectURL(t, m[2]), client.Config{}).Admin(t.Context(), "status", "", nil, &st); err != nil {
		t.Fatal(err)
	}
	for _, b := range st.Store.Bounds {
		if b.Bucket == bus.BucketMCP {
			if strconv.FormatUint(b.Refused, 10) != string(metric[1]) || b.LastRefused == nil {
				t.Fatalf("status: %+v, the metric %s", b, metric[1])
			}
			return
		}
	}
	t.Fatalf("status has no mcp bound: %+v", st.Store.Bounds)
}
