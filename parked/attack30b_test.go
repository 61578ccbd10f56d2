package parked

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestAttackSameHeldInput (session 30, second red team): a continuation
// holds a parked call's input of 1 KiB or more by its canon digest (hold),
// and a re-sent copy is compared with it by that digest (Same). A copy is
// taken exactly when bus.SameCalls would take it beside the whole input:
// the same value written otherwise (key order, white space, escapes, the
// input as a JSON string) is the same call; another value, the digest
// stand-in itself as input, a call added, left out, moved, or a held
// call's id given to the queued call, is refused.
func TestAttackSameHeldInput(t *testing.T) {
	x := strings.Repeat("x", 2<<10)
	in := `{"a":1,"x":"` + x + `"}`
	call := func(id, name, input string) bus.Call {
		return bus.Call{ID: id, Name: name, Input: json.RawMessage(input)}
	}
	first := []bus.Call{call("c0", "ask", in), call("c1", "after", `{"b":2}`)}
	b := &Batch{ReplyID: "r1", Data: bus.Batch{Calls: first}}
	b.hold([]string{"c0", "c1"})
	if len(b.Held) != 1 || b.Data.Calls[0].Input != nil || first[0].Input == nil || b.Data.Calls[1].Input == nil {
		t.Fatalf("held %v, calls %+v", b.Held, b.Data.Calls)
	}
	quoted, _ := json.Marshal(in)
	for name, copy := range map[string][]bus.Call{
		"as sent":       first,
		"key order":     {call("c0", "ask", `{"x":"`+x+`","a":1}`), call("c1", "after", `{"b":2}`)},
		"white space":   {call("c0", "ask", " {\n\"a\" : 1 ,\t\"x\":\""+x+"\"} "), call("c1", "after", `{"b":2}`)},
		"escapes":       {call("c0", "ask", `{"\u0061":1.0,"x":"\u0078`+x[1:]+`"}`), call("c1", "after", `{"b":2}`)},
		"a JSON string": {call("c0", "ask", string(quoted)), call("c1", "after", `{"b":2}`)},
	} {
		if err := b.Same(copy); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
		if err := bus.SameCalls("r1", first, copy); err != nil {
			t.Errorf("%s: the whole input refuses it: %v", name, err)
		}
	}
	for name, copy := range map[string][]bus.Call{
		"another value":    {call("c0", "ask", `{"a":2,"x":"`+x+`"}`), call("c1", "after", `{"b":2}`)},
		"the stand-in":     {call("c0", "ask", string(heldInput(b.Held["c0"]))), call("c1", "after", `{"b":2}`)},
		"nothing":          {call("c0", "ask", ""), call("c1", "after", `{"b":2}`)},
		"a call added":     {call("c0", "ask", in), call("c1", "after", `{"b":2}`), call("c2", "after", `{}`)},
		"a call left out":  {call("c0", "ask", in)},
		"moved":            {call("c1", "after", `{"b":2}`), call("c0", "ask", in)},
		"ids swapped":      {call("c1", "ask", in), call("c0", "after", `{"b":2}`)},
		"the held id's":    {call("c0", "after", `{"b":2}`), call("c1", "ask", in)},
		"another tool":     {call("c0", "after", in), call("c1", "after", `{"b":2}`)},
		"the queued input": {call("c0", "ask", in), call("c1", "after", `{"b":3}`)},
	} {
		if err := b.Same(copy); err == nil {
			t.Errorf("%s: taken", name)
		}
	}
}
