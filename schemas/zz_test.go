package schemas

import (
	"fmt"
	"strings"
	"testing"
)

func BenchmarkZZ(b *testing.B) {
	for _, n := range []int{250, 500, 1000} {
		s := `{"type":"object","allOf":[` + strings.Repeat(`{},`, n-2) + `{}]}`
		b.Run(fmt.Sprint("allOf", n), func(b *testing.B) {
			for b.Loop() {
				compile([]byte(s))
			}
		})
		var sb strings.Builder
		sb.WriteString(`{"type":"object","properties":{`)
		for i := 0; i < n-1; i++ {
			if i > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `"p%d":{"type":"string"}`, i)
		}
		sb.WriteString("}}")
		s2 := sb.String()
		b.Run(fmt.Sprint("props", n), func(b *testing.B) {
			for b.Loop() {
				compile([]byte(s2))
			}
		})
	}
}
