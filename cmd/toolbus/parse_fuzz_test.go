package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseOutput (found: a non-UTF-8 argument silently became U+FFFD;
// runAnswer refuses it now): `toolbus answer`'s output argument never panics the
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
		if utf8.ValidString(s) && !reflect.DeepEqual(again, blocks) {
			t.Fatalf("not a fixed point:\n%+v\n%+v", blocks, again)
		}
		// Non-UTF-8 text turns into U+FFFD once (runAnswer refuses it), then stays.
		enc2, _ := json.Marshal(again)
		if third := parseOutput(string(enc2)); !reflect.DeepEqual(third, again) {
			t.Fatalf("not a fixed point:\n%s\n%s", enc, enc2)
		}
	})
}

func TestAnswerRefusesNonUTF8(t *testing.T) {
	_, _, err := exec(t.Context(), "answer", "c1", "\xc9", "--nats", "nats://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "not UTF-8") {
		t.Fatalf("answer with non-UTF-8 output: %v", err)
	}
}
