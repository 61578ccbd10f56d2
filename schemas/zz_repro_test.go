package schemas

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

func deepSchema(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{"a":`)
	for i := 0; i < n; i++ {
		b.WriteString(`{"properties":{"a":`)
	}
	b.WriteString(`{}`)
	for i := 0; i < n; i++ {
		b.WriteString(`}}`)
	}
	b.WriteString(`}}`)
	return b.String()
}

func TestZZRepro(t *testing.T) {
	for _, n := range []int{100, 200, 400, 800, 1600} {
		s := deepSchema(n)
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		t0 := time.Now()
		_, err := Compile([]byte(s))
		runtime.ReadMemStats(&ms1)
		t.Logf("n=%d bytes=%d compile %v alloc %d MB err=%v", n, len(s), time.Since(t0), (ms1.TotalAlloc-ms0.TotalAlloc)>>20, err)
	}
}
