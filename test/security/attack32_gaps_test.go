package security

import "testing"

// TestAttackFacadeIdleConnections (session 32, red team: a gap in files
// this round did not own). The MCP facade's HTTP server (cmd/router
// serve.go) and the metrics listener (metrics.Serve) set ReadHeaderTimeout
// but neither IdleTimeout nor ReadTimeout, so a client without a token
// that sends one request (401) and then keeps its keep-alive connection
// idle holds a goroutine and a descriptor for good, as the inbox did
// (inbox TestAttackIdleConnections, closed there with IdleTimeout).
func TestAttackFacadeIdleConnections(t *testing.T) {
	t.Skip("GAP: cmd/router/serve.go and metrics/metrics.go: http.Server without IdleTimeout keeps idle unauthenticated connections for good; set IdleTimeout as inbox/serve.go does")
}
