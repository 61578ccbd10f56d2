package embedded

import (
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestRedirectionToDangerousPathParks is issue 26's attack on the rules:
// once a session allows shell(cat:*), `cat x > .gitconfig` (and the same
// into .bashrc or .git) still parks as a safety ask, as write_file on that
// path would, while a plain cat runs.
func TestRedirectionToDangerousPathParks(t *testing.T) {
	e := newEnv(t, 1)
	wt := e.addWriteTools(t)
	ev, err := e.client.Watch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(t.Context())
	r := e.callParked(t, "s1", "r1", bus.Call{ID: "c1", Name: "shell", Input: json.RawMessage(`{"command":"cat x"}`)})
	if len(r.Parked) != 1 || len(r.Parked[0].SuggestedRules) == 0 || r.Parked[0].SuggestedRules[0].Pattern != "cat:*" {
		t.Fatalf("reply %s", jsonOf(r))
	}
	yes := true
	if err := e.answer(t, "shell", "s1", "r1", "c1", bus.Answer{Confirmed: &yes, Rules: []bus.Rule{r.Parked[0].SuggestedRules[0]}}); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ev, bus.TypeBatchDone)
	wantSuccess(t, e.call(t, "s1", []bus.Call{{ID: "c1", Name: "shell", Input: json.RawMessage(`{"command":"cat y"}`)}}).Results[0], `shell ran {"command":"cat y"}`)
	runs := wt.runs.Load()
	for i, cmd := range []string{"cat x > .gitconfig", "cat x > .bashrc", "cat x >> sub/.git/config", `cat x > "$HOME/.gitconfig"`} {
		in, _ := json.Marshal(map[string]string{"command": cmd})
		r := e.callParked(t, "s1", "w"+string(rune('a'+i)), bus.Call{ID: "c1", Name: "shell", Input: in})
		if len(r.Parked) != 1 || r.Parked[0].Kind != bus.KindConfirm || len(r.Parked[0].SuggestedRules) != 0 {
			t.Fatalf("%s: %s", cmd, jsonOf(r))
		}
	}
	if n := wt.runs.Load(); n != runs {
		t.Fatalf("%d dangerous writes ran", n-runs)
	}
}
