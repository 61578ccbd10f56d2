package tracing

import (
	"strings"
	"testing"
)

func TestBound(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	later := "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-" + strings.Repeat("a", 200)
	for _, tc := range []struct {
		name, tp, ts   string
		wantTP, wantTS string
	}{
		{"none", "", "k=v", "", ""},
		{"valid", tp, "k=v", tp, "k=v"},
		{"state at the bound", tp, "k=" + strings.Repeat("v", 510), tp, "k=" + strings.Repeat("v", 510)},
		{"state past the bound", tp, "k=" + strings.Repeat("v", 511), tp, ""},
		{"a later version's fields", later, "", later, ""},
		{"a later version past the bound", later + strings.Repeat("a", 2), "k=v", "", ""},
		{"version 00 with more", tp + "-aa", "k=v", "", ""},
		{"version ff", "ff" + tp[2:], "", "", ""},
		{"upper case", strings.ToUpper(tp), "", "", ""},
		{"trace id zero", "00-" + strings.Repeat("0", 32) + tp[35:], "", "", ""},
		{"span id zero", tp[:36] + strings.Repeat("0", 16) + tp[52:], "", "", ""},
		{"not hex", "00-0af7651916cd43dd8448eb211c80319z-b7ad6b7169203331-01", "", "", ""},
		{"twelve kilobytes", tp + strings.Repeat("a", 12<<10), "k=v", "", ""},
	} {
		gotTP, gotTS := Bound(tc.tp, tc.ts)
		if gotTP != tc.wantTP || gotTS != tc.wantTS {
			t.Errorf("%s: Bound = %.60q, %.60q; want %.60q, %.60q", tc.name, gotTP, gotTS, tc.wantTP, tc.wantTS)
		}
	}
}
