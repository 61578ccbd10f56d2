package offload_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
)

// TestAttackFitUncountedMembers (session 34, red team): Bound, Fit's
// quick upper bound of an output's size, counted a block's type, text,
// media type, data and url only, so a resource link whose description (or
// name, title, uri) was large (a bridged MCP server's resource_link,
// mcp/bridge) passed as fitting: sent inline past the inline limit, and
// past the output ceiling without TooLargeError (the publish then failed
// on the payload limit and the call was never answered). Now every member
// counts: past the ceiling is TooLargeError, past the inline limit the
// output is stored (here: no connection to store it on).
func TestAttackFitUncountedMembers(t *testing.T) {
	off, err := offload.New(nil, "o_outputs", offload.Limits{Inline: 4 << 10, Max: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, big := range []func(string) bus.Block{
		func(s string) bus.Block {
			return bus.Block{Type: bus.BlockData, MediaType: "text/plain", URL: "file:///x", Description: s}
		},
		func(s string) bus.Block {
			return bus.Block{Type: bus.BlockData, MediaType: "text/plain", URL: "file:///x", Name: s}
		},
		func(s string) bus.Block { return bus.Block{Type: bus.BlockText, Title: s} },
		func(s string) bus.Block { return bus.Block{Type: bus.BlockText, URI: s} },
	} {
		b := big(strings.Repeat("x", 2<<20))
		_, err := off.Fit(t.Context(), "s1.r1.c1", []bus.Block{b}, 0, false)
		if tl := (*offload.TooLargeError)(nil); !errors.As(err, &tl) {
			t.Fatalf("a 2 MiB block past the 1 MiB ceiling: %v", err)
		}
		b = big(strings.Repeat("x", 8<<10))
		if out, err := off.Fit(t.Context(), "s1.r1.c1", []bus.Block{b}, 0, false); err == nil {
			t.Fatalf("an 8 KiB block past the 4 KiB inline limit passed as fitting (%d bytes inline)", offload.Size(out, false))
		}
	}
}
