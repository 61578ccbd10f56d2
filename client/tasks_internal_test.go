package client

import (
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestBackgroundNotError: a background task's handle reaches the model as
// a result that did not fail; an error result still does.
func TestBackgroundNotError(t *testing.T) {
	for state, want := range map[string]bool{bus.StateSuccess: false, bus.StateBackground: false,
		bus.StateError: true, bus.StateInterrupted: true, bus.StateDenied: true} {
		if got := isError(bus.Result{State: state}); got != want {
			t.Errorf("%s: isError %v", state, got)
		}
	}
}
