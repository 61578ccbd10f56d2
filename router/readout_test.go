package router

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
)

// memWindows serves one object of session s1 in windows of 7 bytes.
type memWindows struct {
	media string
	data  []byte
}

func (m memWindows) Serve(_ context.Context, session string, g offload.Get) (*offload.Chunk, error) {
	if !strings.Contains(g.URL, "/"+session+".") {
		return nil, bus.Errorf(bus.CodeBadRequest, "no output %s in session %s", g.URL, session)
	}
	if g.Offset > int64(len(m.data)) {
		return nil, bus.Errorf(bus.CodeBadRequest, "offset %d is past the end", g.Offset)
	}
	n := 7
	if g.Max > 0 {
		n = min(n, g.Max)
	}
	end := min(int64(len(m.data)), g.Offset+int64(n))
	return &offload.Chunk{URL: g.URL, MediaType: m.media, Size: int64(len(m.data)), Digest: "d", Offset: g.Offset, Data: m.data[g.Offset:end]}, nil
}

// TestReadOutputRanges: byte ranges move to whole characters, lines span
// windows, binary outputs and another session's are refused (issue 29).
func TestReadOutputRanges(t *testing.T) {
	ref := offload.Ref{Bucket: "o", Name: "s1.r.c.t.0", Digest: strings.Repeat("a", 64)}.String()
	text := memWindows{media: "text/plain; charset=utf-8", data: []byte("héllo\nwörld\nthird line\n")}
	run := func(w windows, session string, in map[string]any) bus.Result {
		raw, _ := json.Marshal(in)
		return readOutput(t.Context(), w, session, bus.Call{ID: "r", Name: ReadOutputName}, raw)
	}
	for _, tc := range []struct {
		name string
		in   map[string]any
		want string
	}{
		{"in the middle of é", map[string]any{"ref": ref, "offset": 2, "limit": 4}, "llo\n"},
		{"ends before a split ö", map[string]any{"ref": ref, "offset": 7, "limit": 2}, "w"},
		{"line 2 across windows", map[string]any{"ref": ref, "line": 2, "limit": 1}, "wörld\n"},
		{"lines to the end", map[string]any{"ref": ref, "line": 2}, "wörld\nthird line\n"},
	} {
		res := run(text, "s1", tc.in)
		if res.State != bus.StateSuccess {
			t.Fatalf("%s: %+v", tc.name, res)
		}
		if _, body, _ := strings.Cut(res.Output[0].Text, "\n"); body != tc.want {
			t.Errorf("%s: %q, want %q (%s)", tc.name, body, tc.want, res.Output[0].Text)
		}
	}
	if res := run(memWindows{media: "image/png", data: []byte{1, 2}}, "s1", map[string]any{"ref": ref}); res.State == bus.StateSuccess ||
		!strings.Contains(res.Output[0].Text, "not text") {
		t.Errorf("binary: %+v", res)
	}
	if res := run(text, "s2", map[string]any{"ref": ref}); res.State == bus.StateSuccess || !strings.Contains(res.Output[0].Text, "no output") {
		t.Errorf("another session: %+v", res)
	}
}
