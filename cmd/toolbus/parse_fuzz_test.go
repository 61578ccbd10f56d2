package main

import (
	"encoding/json"
	"testing"
)

// FuzzParseOutput: `toolbus answer`'s output argument never panics the
// parser, always gives blocks with a type, and a JSON array of blocks
// given back as JSON reads as the same blocks.
func FuzzParseOutput(f *testing.F) {
	for _, s := range []string{`approved`, `[{"type":"text","text":"a"},{"type":"data","media_type":"image/png","data":"iVBO"}]`,
		`[{"type":"text","x":1}]`, `[]`, ` [`, `[{"type":""}]`, `[{"type":"data","url":"nats-object://b/n","size":3}] x`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		blocks := parseOutput(s)
		if blocks == nil {
			t.Fatal("nil blocks")
		}
		for _, b := range blocks {
			if b.Type == "" {
				t.Fatalf("block without a type from %q", s)
			}
		}
		enc, err := json.Marshal(blocks)
		if err != nil {
			t.Fatal(err)
		}
		again := parseOutput(string(enc))
		enc2, _ := json.Marshal(again)
		if string(enc) != string(enc2) {
			t.Fatalf("not a fixed point:\n%s\n%s", enc, enc2)
		}
	})
}
