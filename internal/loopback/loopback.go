// Package loopback holds the DNS-rebinding rule of the servers meant for
// this machine's browser (the MCP facade, the approval inbox).
package loopback

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Host reports whether a Host header or a host:port address names only
// this machine (localhost, 127.0.0.0/8, ::1), with or without a port.
func Host(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// Rebound reports whether r came on a loopback connection with a Host that
// is not a loopback name (none included): a page whose name was rebound to
// 127.0.0.1 (DNS rebinding), same-origin for the browser. A browser sends
// the name of the page's URL, so a page of another origin cannot send a
// loopback one.
func Rebound(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && local != nil && Host(local.String()) && !Host(r.Host)
}
