package worker_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLibraryPackagesStayLight checks that the library packages stay
// light (the team's rule for client and worker): an agent that imports
// client, or a tool author who imports worker, links no NATS server,
// metrics library, OpenTelemetry SDK or exporter, gRPC or MCP SDK.
// Metrics come in through worker.Observer and exporters are set up by the
// commands (internal/cli/daemon).
func TestLibraryPackagesStayLight(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	forbidden := []string{
		"github.com/nats-io/nats-server",
		"github.com/prometheus/",
		"go.opentelemetry.io/otel/exporters/",
		"go.opentelemetry.io/otel/sdk",
		"google.golang.org/grpc",
		"github.com/mark3labs/mcp-go",
		"github.com/modelcontextprotocol/",
	}
	for _, pkg := range []string{"github.com/toolbus/toolbus/client", "github.com/toolbus/toolbus/worker"} {
		out, err := exec.Command(gocmd, "list", "-deps", pkg).Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if dep == strings.TrimSuffix(f, "/") || strings.HasPrefix(dep, f) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
