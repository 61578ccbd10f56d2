package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/worker"
)

// TestAttackTerminalSpoofedConfirmation (session 18, red team): an agent
// parks a shell command for a confirmation whose text the operator reads
// in `toolbus watch-handoff` before `toolbus confirm <call>`. The input is
// printed as JSON (its control characters escaped), but the router's
// reason quotes the command's computed write target as written, and the
// suggested rule holds the command's first word: an ESC [1A ESC [2K and a
// carriage return there erased the line on the operator's terminal and
// wrote a benign-looking one over it ("sh {"command":"ls"}"), while the
// call that waits is "rm -rf ~". Every line the command prints from what
// others wrote (events, requests, reasons, rules, descriptions, parked
// calls) now shows control characters, invalid UTF-8 and bidirectional
// overrides escaped.
func TestAttackTerminalSpoofedConfirmation(t *testing.T) {
	d := newDeployment(t)
	type shIn struct {
		Command string `json:"command"`
	}
	_, err := d.x.AddWorker(t.Context(), xtest.WorkerSpec{Setup: func(w *worker.Worker) error {
		return worker.Register(w, bus.ToolDef{Name: "sh", Description: "Runs a command \x1b]0;owned\x07 (described by its worker).",
			RuleMatcher: bus.MatcherCommand, RuleField: "command"},
			func(context.Context, *worker.Call, shIn) (string, error) { return "ran", nil })
	}})
	if err != nil {
		t.Fatal(err)
	}
	d.waitListed(t, "sh")
	fake := "\x1b[1A\x1b[2K\r2026-12-05 10:00:00.000 s5 r1 c1 sh {\"command\":\"ls\"} — asks: no rule allows this call of sh\n"
	cmd := `rm -rf ~; echo x > "$H` + fake + `/.git/config"`
	in, _ := json.Marshal(map[string]string{"command": cmd})
	d.park(t, "s5", "r1", "sh", string(in), bus.KindConfirm)
	cmd2 := "\x1b[2K\rls:\u202e; rm -rf ~"
	in2, _ := json.Marshal(map[string]string{"command": cmd2})
	d.park(t, "s6", "r2", "sh", string(in2), bus.KindConfirm)

	stdout, _, stop := background(t, "watch-handoff", "sh", "--confirm", "--nats", d.url)
	waitOutput(t, stdout, " s5 r1 c1 sh ")
	waitOutput(t, stdout, " s6 r2 c1 sh ")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	tools, _, err := exec(t.Context(), "tools", "--session", "s5", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	parkedOut, _, err := exec(t.Context(), "parked", "--nats", d.url)
	if err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"watch-handoff": stdout.String(), "tools": tools, "parked": parkedOut} {
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if i := strings.IndexFunc(line, func(r rune) bool {
				return r != '\t' && (unicode.IsControl(r) || r == unicode.ReplacementChar || unicode.Is(unicode.Bidi_Control, r))
			}); i >= 0 {
				t.Errorf("%s printed %q: a control character reaches the terminal at byte %d of %q", name, line[i:min(len(line), i+4)], i, line)
			}
		}
	}
}
