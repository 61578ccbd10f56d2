package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCatalogMetrics: toolbus_catalog_tools, _groups, _bound{kind} and
// _refused_total{kind} (protocol 1.25) are all registered and read at scrape.
func TestCatalogMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewRouter(reg, RouterSources{LiveWorkers: func() map[string][]string { return nil }, ParkedNow: func() int { return 0 }, Sessions: func() int { return 0 },
		Catalog: []Catalog{{Kind: "tool", Held: func() int { return 4090 }, Bound: func() (int, uint64) { return 4096, 7 }},
			{Kind: "group", Held: func() int { return 3 }, Bound: func() (int, uint64) { return 1024, 0 }}}})
	want := `
# HELP toolbus_catalog_bound The catalogue's bound on names, by kind (--max-tools, --max-groups; 0: none).
# TYPE toolbus_catalog_bound gauge
toolbus_catalog_bound{kind="group"} 1024
toolbus_catalog_bound{kind="tool"} 4096
# HELP toolbus_catalog_groups Names in the router's catalogue cache (P_tools, P_groups).
# TYPE toolbus_catalog_groups gauge
toolbus_catalog_groups 3
# HELP toolbus_catalog_refused_total New names refused limit_exceeded at the catalogue's bound, by kind.
# TYPE toolbus_catalog_refused_total counter
toolbus_catalog_refused_total{kind="group"} 0
toolbus_catalog_refused_total{kind="tool"} 7
# HELP toolbus_catalog_tools Names in the router's catalogue cache (P_tools, P_groups).
# TYPE toolbus_catalog_tools gauge
toolbus_catalog_tools 4090
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "toolbus_catalog_bound", "toolbus_catalog_groups", "toolbus_catalog_refused_total", "toolbus_catalog_tools"); err != nil {
		t.Fatal(err)
	}
}
