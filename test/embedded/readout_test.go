package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/worker"
)

// TestReadOutput: a 3 MiB output stored in the outputs object store is
// read back by the model through the built-in read_output (router.Guard
// ReadOutput, docs/protocol.md 11): listed; a byte range, a line range,
// the last part, the per-call bound; another session's output refused as
// missing; a bad input refused (issue 29).
func TestReadOutput(t *testing.T) {
	e := startEnv(t, 1, false, router.Config{Guard: router.Guard{ReadOutput: true}})
	big := bigText(3 << 20) // numbered lines of 59 bytes
	lines := strings.SplitAfter(big, "\n")
	n := len(lines)
	e.startWorker(worker.Config{}, func(w *worker.Worker) {
		handle(t, w, bus.ToolDef{Name: "dump", ReadOnly: true, Permission: bus.PermissionAllow},
			func(context.Context, *worker.Call) (*bus.ExecResult, error) {
				return &bus.ExecResult{Output: bus.Text(big)}, nil
			})
	}, "dump")

	list, err := e.client.Tools(testCtx(t), "ro", bus.FormatToolbus, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(jsonOf(list.Tools), `"name":"read_output"`) {
		t.Fatalf("read_output not listed: %s", jsonOf(list.Tools))
	}
	r := e.call(t, "ro", []bus.Call{{ID: "c1", Name: "dump"}}).Results[0]
	if r.State != bus.StateSuccess || len(r.Output) != 2 {
		t.Fatalf("result %.500s", jsonOf(r))
	}
	ref := r.Output[1].URL
	// The model sees the head, the tail, the size and the digest.
	preview := r.Output[0].Text
	digest := ref[strings.Index(ref, "#sha256=")+8:]
	if !strings.HasPrefix(preview, big[:500]) || !strings.Contains(preview, big[len(big)-200:]) ||
		!strings.Contains(preview, fmt.Sprintf("%d bytes (sha256 %s)", len(big), digest)) || !strings.Contains(preview, "read_output") {
		t.Fatalf("preview %q", preview)
	}

	read := func(session string, in map[string]any) bus.Result {
		t.Helper()
		raw, _ := json.Marshal(in)
		return e.call(t, session, []bus.Call{{ID: "r", Name: "read_output", Input: raw}}).Results[0]
	}
	body := func(res bus.Result) (head, text string) {
		t.Helper()
		if res.State != bus.StateSuccess {
			t.Fatalf("read_output: %s", jsonOf(res))
		}
		head, text, _ = strings.Cut(res.Output[0].Text, "\n")
		return head, text
	}
	for _, tc := range []struct {
		name string
		in   map[string]any
		want string
		head string
	}{
		{"bytes", map[string]any{"ref": ref, "offset": 1000, "limit": 100}, big[1000:1100], "bytes 1000 to 1100 of 3145728"},
		{"default bytes", map[string]any{"ref": ref}, big[:8192], "next part begins at offset 8192"},
		{"bound", map[string]any{"ref": ref, "offset": 64, "limit": 1 << 20}, big[64 : 64+32768], "bytes 64 to 32832"},
		{"lines", map[string]any{"ref": ref, "line": 1001, "limit": 3}, strings.Join(lines[1000:1003], ""), "lines 1001 to 1003, bytes 59000 to 59177"},
		{"the end", map[string]any{"ref": ref, "offset": len(big) - 10}, big[len(big)-10:], "the end of the output"},
		{"last lines", map[string]any{"ref": ref, "line": n - 1}, strings.Join(lines[n-2:], ""), fmt.Sprintf("lines %d to %d", n-1, n)},
		{"line bound", map[string]any{"ref": ref, "line": 2, "limit": 5000}, strings.Join(lines[1:556], "") + lines[556][:32768-555*59], "was cut at 32768 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head, text := body(read("ro", tc.in))
			if text != tc.want || !strings.Contains(head, tc.head) {
				t.Fatalf("head %q, text %d bytes %.80q, want %d bytes %.80q", head, len(text), text, len(tc.want), tc.want)
			}
		})
	}
	// Another session reading ro's output: refused, nothing read.
	if res := read("other", map[string]any{"ref": ref}); res.State == bus.StateSuccess || !strings.Contains(res.Output[0].Text, "no output") {
		t.Fatalf("another session read it: %s", jsonOf(res))
	}
	// The same name with the other session's prefix: the store serves
	// only that session's objects, and this one is not.
	forged := strings.Replace(ref, "/ro.", "/other.", 1)
	if res := read("other", map[string]any{"ref": forged}); res.State == bus.StateSuccess {
		t.Fatalf("a forged name was read: %s", jsonOf(res))
	}
	for _, in := range []map[string]any{{}, {"ref": "https://example.com/x"}, {"ref": ref, "offset": 1, "line": 1},
		{"ref": ref, "line": 0}, {"ref": ref, "offset": -1}, {"ref": ref, "extra": 1}, {"ref": ref, "line": 1 << 20}, {"ref": ref, "offset": len(big) + 1}} {
		if res := read("ro", in); res.State == bus.StateSuccess {
			t.Errorf("%v: read %s", in, jsonOf(res))
		}
	}
}
