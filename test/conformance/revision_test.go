package conformance

import "testing"

// TestOneStoredEventPerBatch: a batch whose results all come back in the
// reply has batch.done as its only event; "events": "calls" adds a
// call.result per call, each before batch.done (docs/protocol.md 3.4).
func TestOneStoredEventPerBatch(t *testing.T) {
	s := start(t)
	s.serve(t, func(c *execCall) { c.text(c.Call.Name + " ran") }, def("a"), def("b"))
	for _, tc := range []struct {
		name, reply, events string
		want                []string
	}{
		{"default", "r1", "", nil},
		{"batch", "r2", "batch", nil},
		{"calls", "r3", "calls", []string{"c1", "c2", "c3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := s.watch(t, "s1")
			data := callsData(Call{ID: "c1", Name: "a"}, Call{ID: "c2", Name: "b"}, Call{ID: "c3", Name: "nope"})
			if tc.events != "" {
				data["events"] = tc.events
			}
			r := s.call(t, "s1", tc.reply, data)
			wantIDs(t, "reply", r.Results, "c1", "c2", "c3")
			es := ev.until(doneOf(tc.reply))
			done := checkBatchEvents(t, es, "s1", tc.reply, "c1", "c2", "c3")
			checkCallResults(t, es, tc.reply, tc.want...)
			if jsonOf(done) != jsonOf(r.Results) {
				t.Errorf("batch.done %s differs from the reply %s", jsonOf(done), jsonOf(r.Results))
			}
		})
	}
	wantError(t, s.callRaw(t, "s1", "r4", M{"calls": []Call{{ID: "c1", Name: "a"}}, "events": "each"}), "bad_request", `events "each" must be "batch" (the default) or "calls"`)
}
